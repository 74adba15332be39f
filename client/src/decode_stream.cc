#include "decode_stream.h"

#include <utility>

#include "convert.h"
#include "proto/convert/message_reuse.h"

namespace entrokv::client_internal {

CallbackDecodeStream::CallbackDecodeStream(v1::EntroKv::Stub* stub) {
  stub->async()->Decode(&context_, this);
  StartRead(&incoming_);
  StartCall();
}

CallbackDecodeStream::~CallbackDecodeStream() {
  context_.TryCancel();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
}

void CallbackDecodeStream::Send(std::unique_ptr<v1::DecodeRequest> request,
                                absl::Time /*deadline*/) {
  // Never blocks: the write is queued; Next()'s deadline bounds the step.
  const v1::DecodeRequest* to_write = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (reads_done_ || done_) return;
    writes_.push_back(std::move(request));
    if (!writing_) {
      writing_ = true;
      to_write = writes_.front().get();
    }
  }
  // Outside the lock: a reaction may run inline.
  if (to_write != nullptr) StartWrite(to_write);
}

void CallbackDecodeStream::OnWriteDone(bool ok) {
  const v1::DecodeRequest* to_write = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (written_ == nullptr) written_ = std::move(writes_.front());
    writes_.pop_front();
    if (ok && !writes_.empty()) {
      to_write = writes_.front().get();
    } else {
      writing_ = false;
      if (!ok) writes_.clear();  // The stream is broken; OnDone follows.
    }
  }
  if (to_write != nullptr) StartWrite(to_write);
}

std::unique_ptr<v1::DecodeRequest> CallbackDecodeStream::TakeWritten() {
  absl::MutexLock lock(&mu_);
  return std::move(written_);
}

void CallbackDecodeStream::OnReadDone(bool ok) {
  if (!ok) {
    absl::MutexLock lock(&mu_);
    reads_done_ = true;
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    responses_.push_back(std::move(incoming_));
  }
  incoming_.Clear();
  StartRead(&incoming_);
}

void CallbackDecodeStream::OnDone(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  reads_done_ = true;
  done_ = true;
  final_status_ =
      status.ok() ? absl::UnavailableError("entrokv: the Decode stream ended")
                  : FromGrpc(status);
}

absl::Status CallbackDecodeStream::Next(absl::Time deadline,
                                        v1::DecodeResponse* response) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !responses_.empty() || done_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (!responses_.empty()) {
    *response = std::move(responses_.front());
    responses_.pop_front();
    return absl::OkStatus();
  }
  if (done_) return final_status_;
  return absl::DeadlineExceededError(
      "entrokv: no step result before the step deadline");
}

void CallbackDecodeStream::Cancel() { context_.TryCancel(); }

namespace {

class SyncDecodeStream final : public DecodeStream {
 public:
  SyncDecodeStream(v1::EntroKv::Stub* stub, DeadlineWatchdog* watchdog)
      : watchdog_(watchdog) {
    // Opening a sync stream would block until its initial metadata is sent,
    // that is until the channel connects, with no deadline. Corked, they
    // leave with the first Send(), which the watchdog bounds.
    context_.set_initial_metadata_corked(true);
    stream_ = stub->Decode(&context_);
  }

  ~SyncDecodeStream() override {
    if (!finished_) {
      context_.TryCancel();
      (void)DrainAndFinish();
    }
  }

  void Send(std::unique_ptr<v1::DecodeRequest> request,
            absl::Time deadline) override {
    if (broken_) return;
    const DeadlineWatchdog::Ticket ticket = watchdog_->Arm(&context_, deadline);
    const bool ok = stream_->Write(*request);
    const bool fired = watchdog_->Disarm(ticket);
    written_ = std::move(request);
    if (!ok) End(fired);
  }

  absl::Status Next(absl::Time deadline,
                    v1::DecodeResponse* response) override {
    if (broken_) return final_status_;
    const DeadlineWatchdog::Ticket ticket = watchdog_->Arm(&context_, deadline);
    const bool ok = stream_->Read(response);
    const bool fired = watchdog_->Disarm(ticket);
    if (ok) return absl::OkStatus();
    End(fired);
    return final_status_;
  }

  void Cancel() override {
    context_.TryCancel();
    if (!broken_) End(false);
  }

  std::unique_ptr<v1::DecodeRequest> TakeWritten() override {
    return std::move(written_);
  }

 private:
  void End(bool deadline_fired) {
    broken_ = true;
    if (deadline_fired) {
      context_.TryCancel();
      final_status_ = absl::DeadlineExceededError(
          "entrokv: no step result before the step deadline");
    }
    const grpc::Status status = DrainAndFinish();
    if (!deadline_fired) {
      final_status_ =
          status.ok()
              ? absl::UnavailableError("entrokv: the Decode stream ended")
              : FromGrpc(status);
    }
  }

  // Finish() does not return while a message the server sent is unread (a
  // pipelined step's answer, when the stream breaks before it is
  // collected): read and drop those first. The call has ended or been
  // cancelled, so the reads return at once; the watchdog bounds them anyway.
  grpc::Status DrainAndFinish() {
    const DeadlineWatchdog::Ticket ticket =
        watchdog_->Arm(&context_, absl::Now() + absl::Milliseconds(100));
    v1::DecodeResponse unread;
    while (stream_->Read(&unread)) {
    }
    watchdog_->Disarm(ticket);
    finished_ = true;
    return stream_->Finish();
  }

  DeadlineWatchdog* watchdog_;
  grpc::ClientContext context_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::DecodeRequest, v1::DecodeResponse>>
      stream_;
  std::unique_ptr<v1::DecodeRequest> written_;
  bool broken_ = false;
  bool finished_ = false;
  absl::Status final_status_;
};

}  // namespace

std::unique_ptr<v1::DecodeRequest> ReusedRequest(DecodeStream* stream) {
  std::unique_ptr<v1::DecodeRequest> request = stream->TakeWritten();
  if (request == nullptr) return std::make_unique<v1::DecodeRequest>();
  // The size its serialization for the write cached, and for each step the
  // capacity protobuf gives its repeated fields beyond what they serialize
  // (four slot ids for one): without it, a shape of a few bytes per entry
  // would free some steps' Append at every message.
  constexpr size_t kStepSlack = 64;
  proto_convert::ClearForReuse(
      static_cast<size_t>(request->GetCachedSize()) +
          kStepSlack * static_cast<size_t>(request->steps_size()),
      request.get());
  return request;
}

std::unique_ptr<DecodeStream> OpenSyncDecodeStream(v1::EntroKv::Stub* stub,
                                                   DeadlineWatchdog* watchdog) {
  return std::make_unique<SyncDecodeStream>(stub, watchdog);
}

std::unique_ptr<DecodeStream> OpenCallbackDecodeStream(
    v1::EntroKv::Stub* stub) {
  return std::make_unique<CallbackDecodeStream>(stub);
}

}  // namespace entrokv::client_internal
