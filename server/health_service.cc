#include "server/health_service.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "server/raw_messages.h"
#include "server/status_conversion.h"

namespace entrokv::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

namespace {

grpc::Status Serialize(HealthCheckResponse::ServingStatus status,
                       grpc::ByteBuffer* out) {
  HealthCheckResponse response;
  response.set_status(status);
  return ToGrpcStatus(SerializeMessage(response, out));
}

}  // namespace

// One Watch call. The service sends it statuses (Send(), under the
// service's lock, so in the order they were set); it writes one at a time,
// the latest pending one next, and skips a status equal to the last one it
// wrote or queued (a SetServing() that changes nothing). It ends when the client cancels it, a write
// fails, or the watches end, and deletes itself once its Finish and its done
// notification have both come back.
class HealthWatch final : public AsyncCall {
 public:
  HealthWatch(HealthService* service, grpc::ServerCompletionQueue* queue,
              LiveCalls* live)
      : service_(service), queue_(queue), live_(live) {}
  ~HealthWatch() override { live_->Leave(); }

  static void Ask(HealthService* service, grpc::ServerCompletionQueue* queue,
                  LiveCalls* live) {
    if (live->Enter()) (new HealthWatch(service, queue, live))->Request();
  }

  const std::string& name() const { return name_; }

  // Under the service's lock. Writes `status` (now, or after the write in
  // flight) unless it is the last one written or queued. With `end`, the
  // call ends after that: at once when there is nothing left to write (the
  // caller has taken the watch out of the service's set).
  void Send(HealthCheckResponse::ServingStatus status, bool end) {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    if (end) end_ = true;
    if (status != last_) {
      last_ = status;
      if (writing_) {
        pending_ = status;
      } else {
        WriteLocked(status);
      }
      return;
    }
    if (end_ && !writing_) {
      finishing_ = true;
      writer_.Finish(Ended(), &tags_[kFinished]);
    }
  }

  void Proceed(int op, bool ok) override {
    switch (op) {
      case kArrived: {
        if (!ok) {  // Shutting down: the call never started.
          delete this;
          return;
        }
        Ask(service_, queue_, live_);
        HealthCheckRequest request;
        if (absl::Status status = ParseMessage(&request_, &request);
            !status.ok()) {
          {
            absl::MutexLock lock(&mu_);
            finishing_ = true;
          }
          writer_.Finish(ToGrpcStatus(status), &tags_[kFinished]);
          return;
        }
        name_ = request.service();
        service_->AddWatch(this);
        return;
      }
      case kWritten: {
        bool finish = false;
        grpc::Status status;
        {
          absl::MutexLock lock(&mu_);
          writing_ = false;
          if (!ok || done_) {
            // The client is gone (its cancellation may come back before
            // the write does, which then finishes the call here).
            finish = true;
            status = grpc::Status(grpc::StatusCode::CANCELLED, "watch ended");
          } else if (pending_.has_value()) {
            const HealthCheckResponse::ServingStatus next = *pending_;
            pending_.reset();
            WriteLocked(next);
          } else if (end_) {
            finish = true;
            status = Ended();
          }
          if (finish) finishing_ = true;
        }
        if (finish) Finish(status);
        return;
      }
      case kDone: {
        bool finish = false;
        {
          absl::MutexLock lock(&mu_);
          done_ = true;
          // A write in flight fails now and finishes the call.
          if (!finishing_ && !writing_) finishing_ = finish = true;
        }
        if (finish) {
          Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
        }
        MaybeDelete();
        return;
      }
      case kFinished: {
        {
          absl::MutexLock lock(&mu_);
          finished_ = true;
        }
        MaybeDelete();
        return;
      }
      default:
        return;
    }
  }

 private:
  enum Op { kArrived, kWritten, kDone, kFinished, kOps };

  void Request() {
    context_.AsyncNotifyWhenDone(&tags_[kDone]);
    service_->RequestWatch(&context_, &request_, &writer_, queue_, queue_,
                           &tags_[kArrived]);
  }

  static grpc::Status Ended() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the server is shutting down");
  }

  void WriteLocked(HealthCheckResponse::ServingStatus status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // A response of one enum field always serializes.
    (void)Serialize(status, &out_);
    writing_ = true;
    writer_.Write(out_, &tags_[kWritten]);
  }

  // From the poller thread, not under the service's lock.
  void Finish(const grpc::Status& status) {
    service_->RemoveWatch(this);  // No Send() after this.
    writer_.Finish(status, &tags_[kFinished]);
  }

  void MaybeDelete() {
    bool both = false;
    {
      absl::MutexLock lock(&mu_);
      both = finished_ && done_;
    }
    if (both) delete this;
  }

  HealthService* const service_;
  grpc::ServerCompletionQueue* const queue_;
  LiveCalls* const live_;
  CallTag tags_[kOps] = {
      {this, kArrived}, {this, kWritten}, {this, kDone}, {this, kFinished}};
  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  grpc::ServerAsyncWriter<grpc::ByteBuffer> writer_{&context_};
  std::string name_;  // Set once, before the watch is added.

  absl::Mutex mu_;
  grpc::ByteBuffer out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // The last status written or queued; none at first.
  int last_ ABSL_GUARDED_BY(mu_) = -1;
  std::optional<HealthCheckResponse::ServingStatus> pending_
      ABSL_GUARDED_BY(mu_);
  bool end_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

HealthService::HealthService() {
  check_.request = [this](grpc::ServerContext* context,
                          grpc::ByteBuffer* request,
                          UnaryMethod::Responder* responder,
                          grpc::ServerCompletionQueue* queue, void* tag) {
    RequestCheck(context, request, responder, queue, queue, tag);
  };
  check_.serve = [this](const std::string& /*peer*/,
                        grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
    return Check(request, response);
  };
}

HealthService::~HealthService() = default;

void HealthService::RequestCalls(grpc::ServerCompletionQueue* queue,
                                 LiveCalls* live) {
  AskUnary(&check_, queue, live);
  HealthWatch::Ask(this, queue, live);
}

void HealthService::SetServing(
    std::initializer_list<std::string_view> services, bool serving) {
  absl::MutexLock lock(&mu_);
  for (std::string_view service : services) {
    serving_[std::string(service)] = serving;
  }
  for (HealthWatch* watch : watches_) {
    if (std::find(services.begin(), services.end(), watch->name()) ==
        services.end()) {
      continue;
    }
    watch->Send(serving ? HealthCheckResponse::SERVING
                        : HealthCheckResponse::NOT_SERVING,
                /*end=*/false);
  }
}

void HealthService::EndWatches() {
  absl::MutexLock lock(&mu_);
  watches_ended_ = true;
  for (HealthWatch* watch : watches_) {
    watch->Send(StatusOf(watch->name()), /*end=*/true);
  }
  watches_.clear();  // Each ends by itself now.
}

grpc::Status HealthService::Check(grpc::ByteBuffer* request_bytes,
                                  grpc::ByteBuffer* response) {
  HealthCheckRequest request;
  if (absl::Status status = ParseMessage(request_bytes, &request);
      !status.ok()) {
    return ToGrpcStatus(status);
  }
  HealthCheckResponse::ServingStatus status;
  {
    absl::MutexLock lock(&mu_);
    status = StatusOf(request.service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "unknown service: " + request.service());
  }
  return Serialize(status, response);
}

HealthCheckResponse::ServingStatus HealthService::StatusOf(
    const std::string& service) const {
  const auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING
                    : HealthCheckResponse::NOT_SERVING;
}

void HealthService::AddWatch(HealthWatch* watch) {
  absl::MutexLock lock(&mu_);
  if (!watches_ended_) watches_.insert(watch);
  // Under the lock, so that no status set later is sent before this one.
  watch->Send(StatusOf(watch->name()), /*end=*/watches_ended_);
}

void HealthService::RemoveWatch(HealthWatch* watch) {
  absl::MutexLock lock(&mu_);
  watches_.erase(watch);
}

}  // namespace entrokv::server
