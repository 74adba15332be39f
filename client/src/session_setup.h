class ConnectionWatch;

// What a Client lends each of its sessions.(ClientShared), and the calls that
// creating a session, attaching one and a recovery share: a new server
// session, a new Decode stream, and an attach on it. Internal to the client
// library.
//
// Thread-safety: the functions are thread-safe; a DecodeStream they open or
// attach on is used by one thread at a time.

#ifndef ENTROKV_CLIENT_SRC_SESSION_SETUP_H_
#define ENTROKV_CLIENT_SRC_SESSION_SETUP_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "background_calls.h"
#include "counter_totals.h"
#include "decode_stream.h"
#include "entrokv/client/session.h"
#include "entrokv/core/config.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "state_log.h"

namespace entrokv::client_internal {

class ConnectionWatch;

// What a Client lends each of its sessions. The stub keeps the channel alive;
// the watchdog serves the sessions' sync streams; the totals receive every
// change of their counters; rpc_deadline bounds the closes sent in the
// background.
struct ClientShared {
  std::shared_ptr<grpc::Channel> channel;
  std::shared_ptr<v1::EntroKv::Stub> stub;
  std::shared_ptr<DeadlineWatchdog> watchdog;
  std::shared_ptr<CounterTotals> totals;
  std::shared_ptr<HealthWatch> health;
  // Polls the channel while it reconnects (connection_watch.h); held here
  // because sessions may outlive their Client.
  std::shared_ptr<ConnectionWatch> connection;
  std::shared_ptr<StateLog> log;
  absl::Duration rpc_deadline;
};

// True when `status` is a failure of the server or of the transport, not of
// the caller's input: UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED (a
// server limit), INTERNAL, UNKNOWN, ABORTED, CANCELLED, DATA_LOSS,
// UNIMPLEMENTED (a server of another version). The caller's own errors
// (INVALID_ARGUMENT, ALREADY_EXISTS, NOT_FOUND, FAILED_PRECONDITION, ...)
// are not.
bool IsServerSideFailure(const absl::Status& status);

// A server session as CreateSession made it.
struct CreatedSession {
  std::string id;
  SessionConfig config;  // Effective: defaults filled in by the server.
};
// Calls CreateSession, waiting until `deadline` at most. A response whose
// config cannot be read is InternalError (and its session is closed in the
// background).
absl::StatusOr<CreatedSession> CreateServerSession(
    const ClientShared& shared, const SessionConfig& config,
    const ShadowRequest& shadowing, std::string_view id, absl::Time deadline);
// A new Decode stream of the given kind over the shared channel.
std::unique_ptr<DecodeStream> OpenStream(const ClientShared& shared,
                                         StreamApi api);
// Attaches `id` to `stream`, waiting until `deadline` at most.
absl::Status AttachOn(DecodeStream* stream, const std::string& id,
                      absl::Time deadline);

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_SESSION_SETUP_H_
