// EntroKvService: the entrokv.v1.EntroKv gRPC service, on the async API:
// CallPollers (server/call_pollers.h) carry its calls on the server's own
// threads, asking the service for what each method does (RequestCalls()).
//
// Unary calls (CreateSession, CloseSession, GetSession, ListSessions) go to the
// SessionRegistry. Each Decode stream's handler reads one DecodeRequest,
// applies it (attach, steps, detach) and writes one DecodeResponse before
// reading the next, so a stream's handler never runs concurrently, at most
// one of its requests is in flight, and the sessions it holds are stepped
// without a lock: a message's steps run on a shared StepPool in parallel over
// distinct sessions, each session's steps in order on one thread
// (docs/design.md "Batches"). A failed step is answered in its result and
// leaves the stream open. When a stream ends, for any reason, its sessions
// are detached (they stay attachable until the idle timeout). Echo is a bare
// ping-pong handler (the transport baseline), off unless enabled.
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
// Thread-safety: the pollers call the service from their threads; the service's
// own mutable state is the registry (thread-safe), an atomic count of open
// streams, the metrics (thread-safe) and the per-stream handlers. The registry
// must outlive the gRPC server that serves this service (i.e. until
// Server::Wait() has returned).

#ifndef ENTROKV_SERVER_SERVICE_H_
#define ENTROKV_SERVER_SERVICE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"
#include "server/async_calls.h"
#include "server/call_pollers.h"
#include "server/metrics.h"
#include "server/service_limits.h"
#include "server/session_registry.h"
#include "server/step_pool.h"
#include "server/stream_handler.h"

namespace entrokv::server {

// Every method raw (so that the service parses, and refuses, messages
// itself) and async (carried by CallPollers).
using RawEntroKvService = v1::EntroKv::WithRawMethod_CreateSession<
    v1::EntroKv::WithRawMethod_CloseSession<
        v1::EntroKv::WithRawMethod_GetSession<
            v1::EntroKv::WithRawMethod_ListSessions<
                v1::EntroKv::WithRawMethod_Decode<
                    v1::EntroKv::WithRawMethod_Echo<v1::EntroKv::Service>>>>>>;

class EntroKvService final : public RawEntroKvService {
 public:
  // REQUIRES: registry != nullptr and metrics != nullptr, both outliving the
  // service's calls. The service counts its work and rejections in
  // `metrics`.
  EntroKvService(SessionRegistry* registry, const ServiceLimits& limits,
                 ServerMetrics* metrics);

  // Asks for one call of each method on `queue` (CallPollers::RequestCalls).
  void RequestCalls(grpc::ServerCompletionQueue* queue, LiveCalls* live);

  // The unary methods: parse `request`, fill `response`.
  grpc::Status ServeCreateSession(const std::string& peer,
                                  grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response);
  grpc::Status ServeCloseSession(const std::string& peer,
                                 grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response);
  grpc::Status ServeGetSession(const std::string& peer,
                               grpc::ByteBuffer* request,
                               grpc::ByteBuffer* response);
  grpc::Status ServeListSessions(const std::string& peer,
                                 grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response);

  // The handler of a new Decode (Echo) stream from `peer`; null when the
  // stream is refused, with `*refused` the status to end it with.
  std::unique_ptr<StreamHandler> OpenDecode(const std::string& peer,
                                            grpc::Status* refused);
  std::unique_ptr<StreamHandler> OpenEcho(const std::string& peer,
                                          grpc::Status* refused);

  // Threads a DecodeRequest's steps run on (ServiceLimits::step_workers).
  int step_workers() const { return pool_->size(); }

  // Decode and Echo streams open now.
  int64_t open_streams() const {
    return open_streams_.load(std::memory_order_relaxed);
  }

 private:
  // Takes a stream slot (false: --max_streams is reached).
  bool TryOpenStream();
  absl::Status TooManyStreams(const std::string& peer) const;

  SessionRegistry* const registry_;
  const ServiceLimits limits_;
  ServerMetrics* const metrics_;
  std::atomic<int64_t> open_streams_{0};
  const std::unique_ptr<StepPool> pool_;
  std::vector<UnaryMethod> unary_methods_;
  std::vector<StreamMethod> stream_methods_;
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_SERVICE_H_
