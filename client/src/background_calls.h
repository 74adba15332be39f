// Calls a Client sends in the background and does not wait for: the close of
// a server session it gave up (CloseInBackground), and the health checks of
// its degraded sessions (HealthWatch). gRPC ends such a call on one of its
// callback threads; the call is then kept until an engine's thread deletes it
// (SweepBackgroundCalls), because it may hold the last reference to a
// channel. Internal to the client library.
//
// Thread-safety: every function and HealthWatch are thread-safe.

#ifndef ENTROKV_CLIENT_SRC_BACKGROUND_CALLS_H_
#define ENTROKV_CLIENT_SRC_BACKGROUND_CALLS_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace entrokv::client_internal {

// The health watch of a Client's degraded sessions (session.h, "Recovery"):
// grpc.health.v1 checks sent in the background, one at a time and at most
// every kEvery, whose answers say whether the server serves. A check also
// makes a channel in TRANSIENT_FAILURE reconnect (gRPC reconnects only when a
// call asks). Thread-safe.
class HealthWatch {
 public:
  static constexpr absl::Duration kEvery = absl::Milliseconds(100);

  // Sends a check on `channel` (answered or given up within `timeout`)
  // unless one is in flight or the last went less than kEvery ago. With
  // `now_due` (a session has just degraded, and needs a check sent from now
  // on), the kEvery limit does not apply, and when a check is in flight
  // another follows as soon as it is answered.
  static void Check(const std::shared_ptr<HealthWatch>& watch,
                    const std::shared_ptr<grpc::Channel>& channel,
                    absl::Duration timeout, bool now_due = false);
  // True when the latest answered check was sent at or after `since` and
  // found the server serving (SERVING, or UNIMPLEMENTED: a server without
  // the health service is up all the same).
  bool ServingSince(absl::Time since) const;

 private:
  // Sends the check (from an engine's thread unless `on_grpc_thread`).
  static void Send(const std::shared_ptr<HealthWatch>& watch,
                   const std::shared_ptr<grpc::Channel>& channel,
                   absl::Duration timeout, absl::Time now, bool on_grpc_thread);
  // Records an answer; true when another check is due at once.
  bool Answered(absl::Time sent, bool serving);

  mutable absl::Mutex mu_;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool follow_up_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_sent_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time answered_sent_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
};

// Sends CloseSession for `id` and returns at once: best effort, bounded by
// `deadline` (counted from now); its outcome is ignored.
void CloseInBackground(std::shared_ptr<v1::EntroKv::Stub> stub,
                       const std::string& id, absl::Duration deadline);
// Deletes the background calls above that have ended (they may hold the last
// reference to a channel, which must go on an engine's thread, not gRPC's).
void SweepBackgroundCalls();

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_BACKGROUND_CALLS_H_
