// grpc.health.v1.Health (proto/grpc/health/v1/health.proto), served on the
// async API by the server's own pollers (server/call_pollers.h) in place of
// gRPC's default health service, whose callback threads would poll beside
// them.
//
// It answers as gRPC's default service does: Check gives a known service's
// status (SERVING or NOT_SERVING) and NOT_FOUND for any other name; Watch
// sends the status at once (SERVICE_UNKNOWN for an unknown name), then each
// change, for as long as the call lasts. The names are those SetServing()
// was given; "" is the whole server. EndWatches() ends the Watch calls open
// now, and any that arrive later, UNAVAILABLE, once each has been sent the
// status of that moment: a draining server is not held open by its watchers.
//
// Thread-safety: thread-safe.

#ifndef ENTROKV_SERVER_HEALTH_SERVICE_H_
#define ENTROKV_SERVER_HEALTH_SERVICE_H_

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/completion_queue.h"
#include "server/async_calls.h"
#include "server/call_pollers.h"

namespace entrokv::server {

class HealthWatch;  // health_service.cc

class HealthService final
    : public grpc::health::v1::Health::WithRawMethod_Check<
          grpc::health::v1::Health::WithRawMethod_Watch<
              grpc::health::v1::Health::Service>> {
 public:
  HealthService();
  ~HealthService() override;  // REQUIRES: every call has ended.

  // Asks for one Check and one Watch call on `queue`
  // (CallPollers::RequestCalls).
  void RequestCalls(grpc::ServerCompletionQueue* queue, LiveCalls* live);

  // Sets the status of each of `services` (and makes the names known) at
  // once: no Check or Watch sees one of them changed and another not yet.
  // Their watchers are then sent the new status.
  void SetServing(std::initializer_list<std::string_view> services,
                  bool serving);

  // Ends the Watch calls (see above).
  void EndWatches();

 private:
  friend class HealthWatch;

  // What Check answers: the serialized HealthCheckResponse, or the call's
  // error.
  grpc::Status Check(grpc::ByteBuffer* request, grpc::ByteBuffer* response);

  // `service`'s status; SERVICE_UNKNOWN for a name never set.
  grpc::health::v1::HealthCheckResponse::ServingStatus StatusOf(
      const std::string& service) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // A new Watch call: sends it the status now (and ends it after that when
  // the watches have ended).
  void AddWatch(HealthWatch* watch);
  void RemoveWatch(HealthWatch* watch);  // No Send() to it after this.

  UnaryMethod check_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<HealthWatch*> watches_ ABSL_GUARDED_BY(mu_);
  bool watches_ended_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_HEALTH_SERVICE_H_
