#include "entrokv/client/client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "convert.h"
#include "decode_stream.h"
#include "entrokv/core/sketch.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "proto/convert/config_convert.h"
#include "session_impl.h"

namespace entrokv {
namespace {

using client_internal::EffectiveConfigFromProto;
using client_internal::FromGrpc;
using client_internal::FromProto;
using client_internal::InfoFromProto;

bool IsUnreachable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

class ClientImpl final : public Client {
 public:
  ClientImpl(const ClientOptions& options,
             std::shared_ptr<v1::EntroKv::Stub> stub)
      : options_(options),
        stub_(std::move(stub)),
        watchdog_(std::make_shared<client_internal::DeadlineWatchdog>()),
        totals_(std::make_shared<client_internal::CounterTotals>()) {}

  const ClientOptions& options() const override { return options_; }

  SessionCounters counters() const override { return totals_->Snapshot(); }

  absl::StatusOr<std::unique_ptr<Session>> CreateSession(
      const SessionConfig& config, const SessionOptions& options,
      std::string_view session_id) override {
    absl::Status valid = ValidateSessionConfig(config);
    if (!valid.ok()) return valid;
    // A bad projection is the caller's error: say so before any RPC.
    absl::StatusOr<Sketcher> sketcher =
        Sketcher::Create(config, options.projection);
    if (!sketcher.ok()) return sketcher.status();
    v1::CreateSessionRequest request;
    proto::ToProto(config, request.mutable_config());
    request.set_session_id(std::string(session_id));
    v1::CreateSessionResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    absl::Status status =
        FromGrpc(stub_->CreateSession(&context, request, &response));
    if (!status.ok()) {
      if (IsUnreachable(status) && options.offline_when_unavailable) {
        return std::make_unique<Session>(
            std::make_unique<Session::Impl>(totals_, config, options, status));
      }
      return status;
    }
    SessionConfig effective = config;
    if (response.session().has_config()) {
      absl::StatusOr<SessionConfig> read =
          EffectiveConfigFromProto(response.session().config());
      if (!read.ok()) {
        (void)CloseSession(response.session_id());
        return read.status();
      }
      effective = *read;
    }
    absl::StatusOr<std::unique_ptr<Session>> session =
        Open(response.session_id(), effective, options, options.first_step,
             /*steps_done=*/0, {});
    if (!session.ok()) {
      // Do not leave an unreachable session behind until the idle timeout.
      (void)CloseSession(response.session_id());
    }
    return session;
  }

  absl::StatusOr<std::unique_ptr<Session>> Attach(
      std::string_view session_id, const SessionOptions& options,
      absl::Span<const uint64_t> live_slots) override {
    absl::StatusOr<SessionInfo> info = GetSession(session_id);
    if (!info.ok()) return info.status();
    const uint64_t first_step = info->stats.last_step.has_value()
                                    ? *info->stats.last_step + 1
                                    : options.first_step;
    return Open(info->id, info->config, options, first_step, info->stats.steps,
                live_slots);
  }

  absl::StatusOr<SessionInfo> GetSession(std::string_view session_id) override {
    v1::GetSessionRequest request;
    request.set_session_id(std::string(session_id));
    v1::GetSessionResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    absl::Status status =
        FromGrpc(stub_->GetSession(&context, request, &response));
    if (!status.ok()) return status;
    return InfoFromProto(response.session());
  }

  absl::StatusOr<std::vector<SessionInfo>> ListSessions(
      ServerInfo* server) override {
    v1::ListSessionsRequest request;
    v1::ListSessionsResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    absl::Status status =
        FromGrpc(stub_->ListSessions(&context, request, &response));
    if (!status.ok()) return status;
    std::vector<SessionInfo> sessions;
    sessions.reserve(response.sessions_size());
    for (const v1::SessionInfo& info : response.sessions()) {
      absl::StatusOr<SessionInfo> read = InfoFromProto(info);
      if (!read.ok()) return read.status();
      sessions.push_back(*std::move(read));
    }
    if (server != nullptr) {
      const v1::ServerStats& s = response.server();
      server->sessions = s.sessions();
      server->max_sessions = s.max_sessions();
      server->bytes_held = s.bytes_held();
      server->max_bytes = s.max_bytes();
      server->gpu_bytes_held = s.gpu_bytes_held();
      server->max_gpu_bytes = s.max_gpu_bytes();
      server->max_live_entries = s.max_live_entries();
      server->gpu_available = s.gpu_available();
    }
    return sessions;
  }

  absl::Status CloseSession(std::string_view session_id) override {
    v1::CloseSessionRequest request;
    request.set_session_id(std::string(session_id));
    v1::CloseSessionResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    return FromGrpc(stub_->CloseSession(&context, request, &response));
  }

 private:
  void SetDeadline(grpc::ClientContext* context) const {
    context->set_deadline(
        absl::ToChronoTime(absl::Now() + options_.rpc_deadline));
  }

  // Opens a Decode stream and attaches `id` to it.
  absl::StatusOr<std::unique_ptr<Session>> Open(
      const std::string& id, const SessionConfig& config,
      const SessionOptions& options, uint64_t first_step, int64_t steps_done,
      absl::Span<const uint64_t> live) {
    std::unique_ptr<client_internal::DecodeStream> stream =
        options.stream_api == StreamApi::kSync
            ? client_internal::OpenSyncDecodeStream(stub_.get(),
                                                    watchdog_.get())
            : client_internal::OpenCallbackDecodeStream(stub_.get());
    auto attach = std::make_unique<v1::DecodeRequest>();
    attach->add_attach(id);
    const absl::Time deadline = absl::Now() + options.attach_deadline;
    stream->Send(std::move(attach), deadline);
    absl::StatusOr<v1::DecodeResponse> response = stream->Next(deadline);
    if (!response.ok()) return response.status();
    if (response->attach_results_size() != 1) {
      return absl::InternalError(absl::StrCat("entrokv: attach answered with ",
                                              response->attach_results_size(),
                                              " results"));
    }
    absl::Status attached = FromProto(response->attach_results(0).status());
    if (!attached.ok()) return attached;
    auto impl = std::make_unique<Session::Impl>(
        stub_, watchdog_, totals_, options_.rpc_deadline, id, config, options,
        first_step, std::move(stream));
    impl->SeedLive(live);
    impl->SetStepsDone(steps_done);
    return std::make_unique<Session>(std::move(impl));
  }

  ClientOptions options_;
  std::shared_ptr<v1::EntroKv::Stub> stub_;
  std::shared_ptr<client_internal::DeadlineWatchdog> watchdog_;
  std::shared_ptr<client_internal::CounterTotals> totals_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("target: empty");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      options.target, grpc::InsecureChannelCredentials(), args);
  auto stub = std::shared_ptr<v1::EntroKv::Stub>(v1::EntroKv::NewStub(channel));
  return std::unique_ptr<Client>(new ClientImpl(options, std::move(stub)));
}

}  // namespace entrokv
