#include "server/call_pollers.h"

#include <memory>
#include <utility>

#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace entrokv::server {
namespace {

void Poll(grpc::ServerCompletionQueue* queue) {
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) {
    CallTag* event = static_cast<CallTag*>(tag);
    event->call->Proceed(event->op, ok);
  }
}

// How often Stop() logs the calls a shut-down server still has.
constexpr absl::Duration kStopWait = absl::Seconds(30);

}  // namespace

bool LiveCalls::Enter() {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  ++count_;
  return true;
}

void LiveCalls::Leave() {
  absl::MutexLock lock(&mu_);
  --count_;
}

bool LiveCalls::StopAndWait(absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  const auto none_left = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return count_ == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&none_left), wait);
}

int64_t LiveCalls::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

CallPollers::CallPollers(int threads, grpc::ServerBuilder* builder,
                         RequestCalls request_calls)
    : request_calls_(std::move(request_calls)) {
  for (int i = 0; i < threads; ++i) {
    queues_.push_back(builder->AddCompletionQueue());
  }
}

CallPollers::~CallPollers() { Stop(); }

void CallPollers::Start() {
  for (const auto& queue : queues_) {
    request_calls_(queue.get(), &live_);
    threads_.emplace_back(Poll, queue.get());
  }
}

void CallPollers::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // The server's shutdown ended every call and failed every request: the
  // pollers see those events through, and the calls delete themselves. A
  // call whose handler still runs (a step stuck in a backend) is waited
  // for: shutting its queue down under it would abort the process.
  if (!threads_.empty()) {
    while (!live_.StopAndWait(kStopWait)) {
      spdlog::error("{} gRPC calls still open {} after shutdown; waiting",
                    live_.count(), absl::FormatDuration(kStopWait));
    }
  }
  for (const auto& queue : queues_) queue->Shutdown();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  // A queue never polled (a start that failed before Start()) was asked
  // for nothing; it is drained all the same before it is destroyed.
  for (const auto& queue : queues_) {
    void* tag = nullptr;
    bool ok = false;
    while (queue->Next(&tag, &ok)) {
    }
  }
}

}  // namespace entrokv::server
