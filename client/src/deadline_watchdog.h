// DeadlineWatchdog: cancels gRPC calls whose deadline passed, for blocking
// streams that gRPC's sync API cannot time out per message.
//
// A caller arms a deadline for its context before a blocking Read or Write
// and disarms it after. If the deadline passes first, one thread cancels the
// context (TryCancel), which makes the blocked call return false; Disarm()
// then reports that the deadline fired. The thread sleeps until the earliest
// armed deadline and is woken only when an earlier one is armed, so a steady
// stream of steps costs a lock and a map insert/erase each, not a wake-up.
//
// Thread-safety: all methods are thread-safe. The destructor stops the thread;
// nothing may be armed then.

#ifndef ENTROKV_CLIENT_SRC_DEADLINE_WATCHDOG_H_
#define ENTROKV_CLIENT_SRC_DEADLINE_WATCHDOG_H_

#include <cstdint>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"

namespace entrokv::client_internal {

class DeadlineWatchdog {
 public:
  DeadlineWatchdog() = default;
  ~DeadlineWatchdog();
  DeadlineWatchdog(const DeadlineWatchdog&) = delete;
  DeadlineWatchdog& operator=(const DeadlineWatchdog&) = delete;

  using Ticket = uint64_t;
  // Cancels `context` at `deadline` unless disarmed first. An infinite
  // deadline arms nothing.
  // REQUIRES: `context` outlives the matching Disarm().
  Ticket Arm(grpc::ClientContext* context, absl::Time deadline);
  // True when the deadline fired (the context was cancelled).
  bool Disarm(Ticket ticket);

 private:
  void Loop();

  absl::Mutex mu_;
  std::map<std::pair<absl::Time, Ticket>, grpc::ClientContext*> armed_
      ABSL_GUARDED_BY(mu_);
  std::map<Ticket, absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
  std::map<Ticket, bool> fired_ ABSL_GUARDED_BY(mu_);
  Ticket next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Time planned_wake_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_DEADLINE_WATCHDOG_H_
