// A Decider that asks an entrokv server over gRPC, through the client library
// (entrokv::Client / entrokv::Session). Built only with the client library.
//
// Each Open() creates a server session and attaches its Decode stream; steps
// use the blocking Session::Step(). The engine's own lag option (evaluator.h)
// gives the pipelined mode's semantics. The per-step deadline is infinite by
// default: an evaluation must measure the server's decisions, never the local
// fallback; a step that falls back anyway (a broken stream) is an error here.
// A demote tier (SessionConfig::tier) is passed to the server with the rest
// of the configuration, and each step's StepOutcome::evicted, demoted and
// promoted become the Decision's lists, as core's StepResult does in process.
// The client library's fail-open hand-back of the demoted entries (as
// evictions at the first local step) never reaches the evaluator here, since
// that step is the error above; an engine that applied it would free their
// host rows with KvCache::Evict, which takes a live or a demoted id.
//
// Thread-safety: Open() is thread-safe (the Client is); each session belongs to
// one decode loop.

#ifndef ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_GRPC_DECIDER_H_
#define ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_GRPC_DECIDER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tinyllama/decider.h"

namespace entrokv::tinyllama {

// `target`: any gRPC target ("127.0.0.1:50051", "unix:/path.sock").
absl::StatusOr<std::unique_ptr<Decider>> CreateGrpcDecider(
    const std::string& target,
    absl::Duration step_deadline = absl::InfiniteDuration());

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_GRPC_DECIDER_H_
