// Raw transport: the two pieces of the library that a caller driving the
// generated gRPC stubs itself, instead of Session, needs to behave as the
// library does: the channel Client::Connect() builds, and the watchdog that
// bounds the library's blocking stream calls. entrokv-loadgen's
// --client=sync uses them to measure the transport without the library.
// Engines need neither.
//
// Only grpc::Channel and grpc::ClientContext are named here, declared, not
// included: a caller of these functions includes gRPC itself.
//
// Thread-safety: every function is thread-safe.

#ifndef ENTROKV_CLIENT_RAW_TRANSPORT_H_
#define ENTROKV_CLIENT_RAW_TRANSPORT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "entrokv/client/client.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace entrokv {

// The channel Client::Connect(options) talks over: its target, plaintext or
// (mutual) TLS from the PEM files, the bearer token on every call, the
// message size limit and the reconnect backoff. Does not contact the server.
// Errors: those of Client::Connect() but the step deadline's environment
// variable, which only sessions read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    const ClientOptions& options);

// The library's deadline watchdog (one per process), for blocking stream
// calls, which gRPC's sync API cannot time out per message: arm before a
// blocking Write, Read or Finish and disarm after. If `deadline` passes
// first, `context` is cancelled (TryCancel), which makes the blocked call
// return, and DisarmCallDeadline() returns true. An infinite deadline arms
// nothing.
// REQUIRES: `context` outlives the matching DisarmCallDeadline().
uint64_t ArmCallDeadline(grpc::ClientContext* context, absl::Time deadline);
bool DisarmCallDeadline(uint64_t ticket);

}  // namespace entrokv

#endif  // ENTROKV_CLIENT_RAW_TRANSPORT_H_
