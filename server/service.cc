#include "server/service.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/convert/config_convert.h"
#include "proto/convert/shadow_convert.h"
#include "server/decode_stream.h"
#include "server/echo_stream.h"
#include "server/raw_messages.h"
#include "server/status_conversion.h"
#include "spdlog/spdlog.h"

namespace entrokv::server {
namespace {

using proto::FromProto;
using proto::ToProto;

void FillInfo(const SessionSnapshot& snapshot, v1::SessionInfo* out) {
  out->set_session_id(snapshot.id);
  ToProto(snapshot.config, out->mutable_config());
  ToProto(snapshot.stats, out->mutable_stats());
  out->set_attached(snapshot.attached);
  out->set_idle_ms(absl::ToInt64Milliseconds(snapshot.idle));
  if (snapshot.shadows.has_value()) {
    ToProto(*snapshot.shadows, out->mutable_shadows());
  }
}

// A unary call on raw bytes: parses the request (InvalidArgument when it
// cannot), runs `handler(request, &response)`, serializes the response.
// A failure is counted in `metrics` under `method`.
template <typename Request, typename Response, typename Handler>
grpc::Status ServeUnary(const std::string& peer, grpc::ByteBuffer* request_bytes,
                        grpc::ByteBuffer* response_bytes,
                        ServerMetrics* metrics, absl::string_view method,
                        Handler handler) {
  Request request;
  Response response;
  absl::Status status = ParseMessage(request_bytes, &request);
  if (!status.ok()) {
    spdlog::debug("{} from {}: {}", request.GetTypeName(), peer,
                  status.ToString());
    metrics->Rejected(method, status);
    return ToGrpcStatus(status);
  }
  status = handler(request, &response);
  if (status.ok()) status = SerializeMessage(response, response_bytes);
  if (!status.ok()) metrics->Rejected(method, status);
  return ToGrpcStatus(status);
}

}  // namespace

EntroKvService::EntroKvService(SessionRegistry* registry,
                               const ServiceLimits& limits,
                               ServerMetrics* metrics)
    : registry_(registry),
      limits_(limits),
      metrics_(metrics),
      pool_(std::make_unique<StepPool>(std::max(1, limits.step_workers))) {
  using Responder = UnaryMethod::Responder;
  using Queue = grpc::ServerCompletionQueue;
  const auto unary = [this](auto request, auto serve) {
    unary_methods_.push_back(UnaryMethod{
        [this, request](grpc::ServerContext* context, grpc::ByteBuffer* bytes,
                        Responder* responder, Queue* queue, void* tag) {
          (this->*request)(context, bytes, responder, queue, queue, tag);
        },
        [this, serve](const std::string& peer, grpc::ByteBuffer* in,
                      grpc::ByteBuffer* out) {
          return (this->*serve)(peer, in, out);
        }});
  };
  unary(&EntroKvService::RequestCreateSession,
        &EntroKvService::ServeCreateSession);
  unary(&EntroKvService::RequestCloseSession,
        &EntroKvService::ServeCloseSession);
  unary(&EntroKvService::RequestGetSession, &EntroKvService::ServeGetSession);
  unary(&EntroKvService::RequestListSessions,
        &EntroKvService::ServeListSessions);
  const auto stream = [this](auto request, auto open) {
    stream_methods_.push_back(StreamMethod{
        [this, request](grpc::ServerContext* context,
                        StreamMethod::Stream* stream, Queue* queue,
                        void* tag) {
          (this->*request)(context, stream, queue, queue, tag);
        },
        [this, open](const std::string& peer, grpc::Status* refused) {
          return (this->*open)(peer, refused);
        }});
  };
  stream(&EntroKvService::RequestDecode, &EntroKvService::OpenDecode);
  stream(&EntroKvService::RequestEcho, &EntroKvService::OpenEcho);
}

void EntroKvService::RequestCalls(grpc::ServerCompletionQueue* queue,
                                  LiveCalls* live) {
  for (const UnaryMethod& method : unary_methods_) {
    AskUnary(&method, queue, live);
  }
  for (const StreamMethod& method : stream_methods_) {
    AskStream(&method, queue, live);
  }
}

grpc::Status EntroKvService::ServeCreateSession(const std::string& peer,
                                          grpc::ByteBuffer* request_bytes,
                                          grpc::ByteBuffer* response_bytes) {
  return ServeUnary<v1::CreateSessionRequest, v1::CreateSessionResponse>(
      peer, request_bytes, response_bytes, metrics_, "CreateSession",
      [&](const v1::CreateSessionRequest& request,
          v1::CreateSessionResponse* response) -> absl::Status {
        SessionConfig config;
        if (absl::Status status = FromProto(request.config(), &config);
            !status.ok()) {
          return status;
        }
        ShadowRequest shadowing;
        if (absl::Status status =
                FromProto(request.shadowing(), config, &shadowing);
            !status.ok()) {
          return status;
        }
        absl::StatusOr<SessionSnapshot> snapshot =
            registry_->Create(config, request.session_id(),
                              request.config().placement_fallback(),
                              shadowing);
        if (!snapshot.ok()) {
          spdlog::warn("CreateSession from {} rejected: {}", peer,
                       snapshot.status().ToString());
          return snapshot.status();
        }
        response->set_session_id(snapshot->id);
        FillInfo(*snapshot, response->mutable_session());
        return absl::OkStatus();
      });
}

grpc::Status EntroKvService::ServeCloseSession(const std::string& peer,
                                          grpc::ByteBuffer* request_bytes,
                                          grpc::ByteBuffer* response_bytes) {
  return ServeUnary<v1::CloseSessionRequest, v1::CloseSessionResponse>(
      peer, request_bytes, response_bytes, metrics_, "CloseSession",
      [&](const v1::CloseSessionRequest& request,
          v1::CloseSessionResponse* response) -> absl::Status {
        if (absl::Status status = RequireSessionId(request.session_id());
            !status.ok()) {
          return status;
        }
        absl::StatusOr<SessionSnapshot> snapshot =
            registry_->Close(request.session_id());
        if (!snapshot.ok()) return snapshot.status();
        FillInfo(*snapshot, response->mutable_session());
        return absl::OkStatus();
      });
}

grpc::Status EntroKvService::ServeGetSession(const std::string& peer,
                                          grpc::ByteBuffer* request_bytes,
                                          grpc::ByteBuffer* response_bytes) {
  return ServeUnary<v1::GetSessionRequest, v1::GetSessionResponse>(
      peer, request_bytes, response_bytes, metrics_, "GetSession",
      [&](const v1::GetSessionRequest& request,
          v1::GetSessionResponse* response) -> absl::Status {
        if (absl::Status status = RequireSessionId(request.session_id());
            !status.ok()) {
          return status;
        }
        absl::StatusOr<SessionSnapshot> snapshot =
            registry_->Get(request.session_id());
        if (!snapshot.ok()) return snapshot.status();
        FillInfo(*snapshot, response->mutable_session());
        return absl::OkStatus();
      });
}

grpc::Status EntroKvService::ServeListSessions(const std::string& peer,
                                          grpc::ByteBuffer* request_bytes,
                                          grpc::ByteBuffer* response_bytes) {
  return ServeUnary<v1::ListSessionsRequest, v1::ListSessionsResponse>(
      peer, request_bytes, response_bytes, metrics_, "ListSessions",
      [&](const v1::ListSessionsRequest&,
          v1::ListSessionsResponse* response) -> absl::Status {
        const std::vector<SessionSnapshot> sessions = registry_->List();
        for (const SessionSnapshot& snapshot : sessions) {
          FillInfo(snapshot, response->add_sessions());
        }
        v1::ServerStats* server = response->mutable_server();
        server->set_sessions(static_cast<int64_t>(sessions.size()));
        server->set_max_sessions(registry_->options().max_sessions);
        server->set_bytes_held(registry_->cpu_bytes_held());
        server->set_max_bytes(limits_.max_bytes);
        server->set_gpu_bytes_held(registry_->gpu_bytes_held());
        server->set_max_gpu_bytes(limits_.max_gpu_bytes);
        server->set_max_live_entries(registry_->options().max_live_entries);
        server->set_gpu_available(registry_->gpu_available());
        server->set_max_shadows(
            registry_->options().shadow_limits.max_shadows);
        server->set_max_shadow_reference_bytes(
            registry_->options().shadow_limits.max_reference_bytes);
        return absl::OkStatus();
      });
}

bool EntroKvService::TryOpenStream() {
  const int64_t before = open_streams_.fetch_add(1, std::memory_order_relaxed);
  if (limits_.max_streams > 0 && before >= limits_.max_streams) {
    open_streams_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  metrics_->StreamOpened();
  return true;
}

absl::Status EntroKvService::TooManyStreams(const std::string& peer) const {
  const absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      "streams: the server's limit of ", limits_.max_streams,
      " open Decode and Echo streams (--max_streams) is reached; retry when "
      "one has ended"));
  spdlog::warn("stream from {} refused: {}", peer, status.ToString());
  return status;
}

std::unique_ptr<StreamHandler> EntroKvService::OpenDecode(
    const std::string& peer, grpc::Status* refused) {
  if (!TryOpenStream()) {
    const absl::Status status = TooManyStreams(peer);
    metrics_->Rejected(kDecode, status);
    *refused = ToGrpcStatus(status);
    return nullptr;
  }
  return NewDecodeStream(registry_, limits_, metrics_, &open_streams_,
                         pool_.get(), peer);
}

std::unique_ptr<StreamHandler> EntroKvService::OpenEcho(
    const std::string& peer, grpc::Status* refused) {
  if (!limits_.enable_echo) {
    const absl::Status status = absl::UnimplementedError(
        "Echo is disabled on this server; start entrokv-server with "
        "--enable_echo for the load-test baseline");
    metrics_->Rejected(kEcho, status);
    *refused = ToGrpcStatus(status);
    return nullptr;
  }
  if (!TryOpenStream()) {
    const absl::Status status = TooManyStreams(peer);
    metrics_->Rejected(kEcho, status);
    *refused = ToGrpcStatus(status);
    return nullptr;
  }
  return NewEchoStream(limits_, metrics_, &open_streams_);
}

}  // namespace entrokv::server
