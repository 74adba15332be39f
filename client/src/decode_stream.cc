#include "decode_stream.h"

#include <utility>

#include "convert.h"

namespace entrokv::client_internal {

DecodeStream::DecodeStream(v1::EntroKv::Stub* stub) {
  stub->async()->Decode(&context_, this);
  StartRead(&incoming_);
  StartCall();
}

DecodeStream::~DecodeStream() {
  context_.TryCancel();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
}

void DecodeStream::Send(std::unique_ptr<v1::DecodeRequest> request) {
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

void DecodeStream::OnWriteDone(bool ok) {
  const v1::DecodeRequest* to_write = nullptr;
  {
    absl::MutexLock lock(&mu_);
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

void DecodeStream::OnReadDone(bool ok) {
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

void DecodeStream::OnDone(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  reads_done_ = true;
  done_ = true;
  final_status_ = status.ok() ? absl::UnavailableError(
                                    "entrokv: the Decode stream ended")
                              : FromGrpc(status);
}

absl::StatusOr<v1::DecodeResponse> DecodeStream::Next(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !responses_.empty() || done_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (!responses_.empty()) {
    v1::DecodeResponse response = std::move(responses_.front());
    responses_.pop_front();
    return response;
  }
  if (done_) return final_status_;
  return absl::DeadlineExceededError(
      "entrokv: no step result before the step deadline");
}

void DecodeStream::Cancel() { context_.TryCancel(); }

}  // namespace entrokv::client_internal
