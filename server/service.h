// EntroKvService: the entrokv.v1.EntroKv gRPC service, on the callback API.
//
// Unary calls (CreateSession, CloseSession, GetSession, ListSessions) go to the
// SessionRegistry. Each Decode stream is a ServerBidiReactor that reads one
// DecodeRequest, applies it (attach, steps, detach) and writes one
// DecodeResponse before reading the next, so a stream's callbacks never run
// concurrently and the sessions it holds are stepped without a lock. A failed
// step is answered in its result and leaves the stream open. When a stream
// ends, for any reason, its sessions are detached (they stay attachable until
// the idle timeout). Echo is a bare ping-pong reactor: the transport baseline.
//
// Thread-safety: gRPC calls the service from its own threads; the service
// holds no mutable state besides the registry (thread-safe) and the per-stream
// reactors. The registry must outlive the gRPC server that serves this
// service (i.e. until Server::Wait() has returned).

#ifndef ENTROKV_SERVER_SERVICE_H_
#define ENTROKV_SERVER_SERVICE_H_

#include <cstdint>

#include "entrokv/v1/entrokv.grpc.pb.h"
#include "server/session_registry.h"

namespace entrokv::server {

// Limits the service reports (ListSessions) or enforces itself.
struct ServiceLimits {
  int64_t max_message_bytes = 0;  // Bounds Echo's reply_bytes; 0: unbounded.
  int64_t max_bytes = 0;          // CPU bytes (enforced by the backend).
  int64_t max_gpu_bytes = 0;      // GPU bytes (enforced by the backend).
};

class EntroKvService final : public v1::EntroKv::CallbackService {
 public:
  // REQUIRES: registry != nullptr and outlives the service's calls.
  EntroKvService(SessionRegistry* registry, const ServiceLimits& limits)
      : registry_(registry), limits_(limits) {}

  grpc::ServerUnaryReactor* CreateSession(
      grpc::CallbackServerContext* context,
      const v1::CreateSessionRequest* request,
      v1::CreateSessionResponse* response) override;
  grpc::ServerUnaryReactor* CloseSession(
      grpc::CallbackServerContext* context,
      const v1::CloseSessionRequest* request,
      v1::CloseSessionResponse* response) override;
  grpc::ServerUnaryReactor* GetSession(
      grpc::CallbackServerContext* context,
      const v1::GetSessionRequest* request,
      v1::GetSessionResponse* response) override;
  grpc::ServerUnaryReactor* ListSessions(
      grpc::CallbackServerContext* context,
      const v1::ListSessionsRequest* request,
      v1::ListSessionsResponse* response) override;

  grpc::ServerBidiReactor<v1::DecodeRequest, v1::DecodeResponse>* Decode(
      grpc::CallbackServerContext* context) override;
  grpc::ServerBidiReactor<v1::EchoMessage, v1::EchoMessage>* Echo(
      grpc::CallbackServerContext* context) override;

 private:
  SessionRegistry* const registry_;
  const ServiceLimits limits_;
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_SERVICE_H_
