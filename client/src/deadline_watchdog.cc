#include "deadline_watchdog.h"

#include <utility>

#include "entrokv/client/raw_transport.h"

namespace entrokv::client_internal {

DeadlineWatchdog::~DeadlineWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    wake_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

DeadlineWatchdog::Ticket DeadlineWatchdog::Arm(grpc::ClientContext* context,
                                               absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const Ticket ticket = next_ticket_++;
  if (deadline == absl::InfiniteFuture()) return ticket;
  armed_.emplace(std::make_pair(deadline, ticket), context);
  deadlines_.emplace(ticket, deadline);
  if (!started_) {
    started_ = true;
    thread_ = std::thread(&DeadlineWatchdog::Loop, this);
  }
  if (deadline < planned_wake_) wake_ = true;
  return ticket;
}

bool DeadlineWatchdog::Disarm(Ticket ticket) {
  absl::MutexLock lock(&mu_);
  auto fired = fired_.find(ticket);
  if (fired != fired_.end()) {
    fired_.erase(fired);
    return true;
  }
  auto it = deadlines_.find(ticket);
  if (it != deadlines_.end()) {
    armed_.erase(std::make_pair(it->second, ticket));
    deadlines_.erase(it);
  }
  return false;
}

void DeadlineWatchdog::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time now = absl::Now();
    while (!armed_.empty() && armed_.begin()->first.first <= now) {
      const Ticket ticket = armed_.begin()->first.second;
      // TryCancel only schedules the cancellation; it does not call back.
      armed_.begin()->second->TryCancel();
      armed_.erase(armed_.begin());
      deadlines_.erase(ticket);
      fired_[ticket] = true;
    }
    planned_wake_ =
        armed_.empty() ? absl::InfiniteFuture() : armed_.begin()->first.first;
    wake_ = false;
    mu_.AwaitWithDeadline(absl::Condition(&wake_), planned_wake_);
  }
}

}  // namespace entrokv::client_internal

namespace entrokv {
namespace {

// Never destroyed: a caller's stream may outlive static destruction.
client_internal::DeadlineWatchdog& ProcessWatchdog() {
  static auto* watchdog = new client_internal::DeadlineWatchdog;
  return *watchdog;
}

}  // namespace

uint64_t ArmCallDeadline(grpc::ClientContext* context, absl::Time deadline) {
  return ProcessWatchdog().Arm(context, deadline);
}

bool DisarmCallDeadline(uint64_t ticket) {
  return ProcessWatchdog().Disarm(ticket);
}

}  // namespace entrokv
