// EntroKvService: the entrokv.v1.EntroKv gRPC service, on the callback API.
//
// Unary calls (CreateSession, CloseSession, GetSession, ListSessions) go to the
// SessionRegistry. Each Decode stream is a ServerBidiReactor that reads one
// DecodeRequest, applies it (attach, steps, detach) and writes one
// DecodeResponse before reading the next, so a stream's callbacks never run
// concurrently, at most one of its requests is in flight, and the sessions it
// holds are stepped without a lock: a message's steps run on a shared
// StepPool in parallel over distinct sessions, each session's steps in order
// on one thread (docs/design.md "Batches"). A failed step is answered in its result
// and leaves the stream open. When a stream ends, for any reason, its sessions
// are detached (they stay attachable until the idle timeout). Echo is a bare
// ping-pong reactor (the transport baseline), off unless enabled.
//
// Every method is registered raw (grpc::ByteBuffer in and out) and parses its
// messages itself: gRPC's generated handlers answer a request they cannot
// parse with UNIMPLEMENTED and no message (unary) or end the stream OK (bidi),
// which hides the client's mistake. Here a malformed request is
// INVALID_ARGUMENT naming the message type, and a Decode stream that receives
// one ends with that status after detaching its sessions (the status and a
// warning name them). Raw parsing also lets a Decode message be refused
// before it is parsed: the top-level fields of the request are counted first,
// and a message with more than ServiceLimits::max_steps_per_message attach,
// step or detach entries ends the stream with RESOURCE_EXHAUSTED naming the
// limit, none of it run.
//
// Thread-safety: gRPC calls the service from its own threads; the service's
// own mutable state is the registry (thread-safe), an atomic count of open
// streams, the metrics (thread-safe) and the per-stream reactors. The registry
// must outlive the gRPC server that serves this service (i.e. until
// Server::Wait() has returned).

#ifndef ENTROKV_SERVER_SERVICE_H_
#define ENTROKV_SERVER_SERVICE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/metrics.h"
#include "server/session_registry.h"
#include "server/step_pool.h"

namespace entrokv::server {

// Limits the service reports (ListSessions) or enforces itself. Each is
// named in the status of a call it refuses by the server flag that sets it.
struct ServiceLimits {
  int64_t max_message_bytes = 0;  // Bounds Echo's replies; 0: unbounded.
  int64_t max_bytes = 0;          // CPU bytes (enforced by the backend).
  int64_t max_gpu_bytes = 0;      // GPU bytes (enforced by the backend).
  // Decode and Echo streams open at once; past it a new stream ends
  // RESOURCE_EXHAUSTED at once. 0: unlimited.
  int64_t max_streams = 0;
  // Entries of each of a DecodeRequest's attach, steps and detach lists;
  // past it the stream ends RESOURCE_EXHAUSTED. REQUIRES: > 0.
  int64_t max_steps_per_message = 1024;
  // Steps of one session in one DecodeRequest; past it each of that
  // session's steps in the message is answered RESOURCE_EXHAUSTED and none
  // runs. REQUIRES: > 0.
  int64_t max_steps_per_session_per_message = 16;
  // Threads a DecodeRequest's steps run on, in parallel over its sessions
  // (StepPool, shared by every stream). REQUIRES: >= 1.
  int step_workers = 1;
  bool enable_echo = false;    // Off: Echo ends UNIMPLEMENTED at once.
  int64_t max_echo_bytes = 0;  // Largest Echo reply payload; 0: unbounded.
};

// Every method raw, so that the service parses (and refuses) messages itself.
using RawEntroKvService = v1::EntroKv::WithRawCallbackMethod_CreateSession<
    v1::EntroKv::WithRawCallbackMethod_CloseSession<
        v1::EntroKv::WithRawCallbackMethod_GetSession<
            v1::EntroKv::WithRawCallbackMethod_ListSessions<
                v1::EntroKv::WithRawCallbackMethod_Decode<
                    v1::EntroKv::WithRawCallbackMethod_Echo<
                        v1::EntroKv::Service>>>>>>;

class EntroKvService final : public RawEntroKvService {
 public:
  // REQUIRES: registry != nullptr and metrics != nullptr, both outliving the
  // service's calls. The service counts its work and rejections in
  // `metrics`.
  EntroKvService(SessionRegistry* registry, const ServiceLimits& limits,
                 ServerMetrics* metrics)
      : registry_(registry),
        limits_(limits),
        metrics_(metrics),
        pool_(std::make_unique<StepPool>(std::max(1, limits.step_workers))) {}

  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Decode(
      grpc::CallbackServerContext* context) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Echo(
      grpc::CallbackServerContext* context) override;

  // Threads a DecodeRequest's steps run on (ServiceLimits::step_workers).
  int step_workers() const { return pool_->size(); }

  // Decode and Echo streams open now.
  int64_t open_streams() const {
    return open_streams_.load(std::memory_order_relaxed);
  }

 private:
  // Takes a stream slot (false: --max_streams is reached).
  bool TryOpenStream();
  absl::Status TooManyStreams(grpc::CallbackServerContext* context) const;

  SessionRegistry* const registry_;
  const ServiceLimits limits_;
  ServerMetrics* const metrics_;
  std::atomic<int64_t> open_streams_{0};
  const std::unique_ptr<StepPool> pool_;
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_SERVICE_H_
