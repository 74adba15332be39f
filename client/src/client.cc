#include "entrokv/client/client.h"

#include <errno.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "background_calls.h"
#include "connection_watch.h"
#include "convert.h"
#include "decode_stream.h"
#include "entrokv/client/raw_transport.h"
#include "entrokv/core/sketch.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "environment.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"
#include "proto/convert/config_convert.h"
#include "session_impl.h"
#include "session_setup.h"

namespace entrokv {
namespace {

using client_internal::FromGrpc;
using client_internal::InfoFromProto;

using client_internal::AttachOn;
using client_internal::ClientShared;
using client_internal::CloseInBackground;
using client_internal::CreatedSession;
using client_internal::CreateServerSession;
using client_internal::IsServerSideFailure;
using client_internal::OpenStream;

// A positive duration as whole milliseconds for a gRPC channel argument.
int Milliseconds(absl::Duration d) {
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1,
                                              std::numeric_limits<int>::max()));
}

// `status` with `what` before its message, its code kept.
absl::Status Prefixed(absl::string_view what, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(what, status.message()));
}

// Adds "authorization: Bearer <token>" to every call of a channel, unary
// and streaming alike. (gRPC's call credentials would send it only over
// TLS; the token also guards plaintext unix sockets and loopback.)
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header)
      : header_(header) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* const header_;  // Owned by the factory.
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

absl::StatusOr<std::string> ReadPem(const char* what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const std::string message =
        absl::StrCat(what, ": cannot read \"", path, "\"");
    return errno == EACCES ? absl::PermissionDeniedError(message)
                           : absl::NotFoundError(message);
  }
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

// Plaintext, or TLS (mutual with a client certificate) per `options`.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const ClientOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_file and tls_key_file: give both or neither");
  }
  if (options.tls_root_certs_file.empty()) {
    if (!options.tls_cert_file.empty()) {
      return absl::InvalidArgumentError(
          "tls_cert_file: needs tls_root_certs_file (TLS)");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> roots =
      ReadPem("tls_root_certs_file", options.tls_root_certs_file);
  if (!roots.ok()) return roots.status();
  ssl.pem_root_certs = *std::move(roots);
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPem("tls_cert_file", options.tls_cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPem("tls_key_file", options.tls_key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

class ClientImpl;

class DecodeBatchImpl final : public DecodeBatch,
                              public client_internal::BatchLink {
 public:
  DecodeBatchImpl(ClientImpl* client, ClientShared shared, StreamApi api)
      : client_(client),
        shared_(std::move(shared)),
        api_(api),
        stream_(OpenStream(shared_, api_)) {}

  // Its sessions outlive it as sessions that cannot step; what they have in
  // flight is decided locally when collected.
  ~DecodeBatchImpl() override {
    FailAll(absl::UnavailableError(
        "entrokv: the session's DecodeBatch was destroyed"));
    for (Session::Impl* member : members_) member->BatchGone();
  }

  absl::StatusOr<std::unique_ptr<Session>> CreateSession(
      const SessionConfig& config, const SessionOptions& options,
      std::string_view session_id) override;

  std::vector<absl::StatusOr<StepOutcome>> Step(
      absl::Span<const BatchStep> steps) override;

  client_internal::DecodeStream* LiveStream() override {
    // What is next read on the stream must be the caller's answer (reading
    // may end the stream).
    while (!flying_.empty()) ReadOne();
    if (ended_) {
      stream_ = OpenStream(shared_, api_);
      ended_ = false;
    }
    return stream_.get();
  }
  int64_t generation() const override { return generation_; }
  void EndStream() override {
    // A late response must never be read as the answer to a later message:
    // the stream goes, and with it every attachment to it.
    stream_->Cancel();
    ended_ = true;
    ++generation_;
    FailAll(absl::UnavailableError("entrokv: the DecodeBatch's stream ended"));
  }

  bool Holds(const Session::Impl* session) const override {
    return gathered_.contains(session);
  }
  v1::SessionStep* AddStep(std::shared_ptr<client_internal::BatchMessage>* m,
                           int* index) override {
    if (open_ == nullptr) {
      open_ = RecycledMessage();
      open_request_ = client_internal::ReusedRequest(stream_.get());
      open_deadline_ = absl::InfiniteDuration();
    }
    *m = open_;
    *index = open_request_->steps_size();
    return open_request_->add_steps();
  }
  void DropLastStep() override { open_request_->mutable_steps()->RemoveLast(); }
  void Gathered(const Session::Impl* session, bool sent,
                absl::Duration deadline) override {
    gathered_.insert(session);
    if (sent) open_deadline_ = std::min(open_deadline_, deadline);
    SendWhenComplete();
  }
  void SendGathered() override {
    gathered_.clear();
    if (open_ == nullptr) return;
    std::shared_ptr<client_internal::BatchMessage> message = std::move(open_);
    std::unique_ptr<v1::DecodeRequest> request = std::move(open_request_);
    message->sent = true;
    message->steps = request->steps_size();
    message->until = absl::Now() + open_deadline_;
    if (message->steps == 0) {
      message->outcome = absl::UnavailableError("entrokv: nothing was sent");
      return;
    }
    if (ended_) {
      // Cannot happen: the stream's end failed the message being gathered,
      // and a session attaches again only to a new stream. Fail safe.
      message->outcome =
          absl::UnavailableError("entrokv: the DecodeBatch's stream ended");
      return;
    }
    stream_->Send(std::move(request), message->until);
    flying_.push_back(std::move(message));
  }
  void Await(client_internal::BatchMessage* message) override {
    if (message == open_.get()) SendGathered();
    while (!message->outcome.has_value() && !flying_.empty()) ReadOne();
  }
  void Closed(const Session::Impl* session) override {
    closed_.insert(session);
    gathered_.erase(session);
    SendWhenComplete();
  }
  void Leave(Session::Impl* session) override {
    members_.erase(session);
    closed_.erase(session);
    gathered_.erase(session);
    SendWhenComplete();
  }

 private:
  // Reads the answer to the oldest message in flight; a failed or malformed
  // one ends the stream.
  void ReadOne() {
    std::shared_ptr<client_internal::BatchMessage> message =
        std::move(flying_.front());
    flying_.pop_front();
    absl::Status read = stream_->Next(message->until, &message->response);
    const bool failed =
        !read.ok() || message->response.results_size() != message->steps;
    message->outcome = std::move(read);
    if (failed) EndStream();
  }
  // A message to gather the next steps in: one this batch made before that
  // no session holds any more (each collected its step), so that its answer
  // is parsed into an earlier answer's memory, or a new one.
  std::shared_ptr<client_internal::BatchMessage> RecycledMessage() {
    for (const std::shared_ptr<client_internal::BatchMessage>& m : made_) {
      if (m.use_count() > 1) continue;
      m->sent = false;
      m->steps = 0;
      m->until = absl::InfinitePast();
      m->outcome.reset();
      return m;
    }
    auto m = std::make_shared<client_internal::BatchMessage>();
    // The one being gathered, two in flight, one answered and not yet
    // collected by all its sessions.
    constexpr size_t kKept = 4;
    if (made_.size() < kKept) made_.push_back(m);
    return m;
  }
  // Sends the message being gathered once every open session has gathered a
  // step for it.
  void SendWhenComplete() {
    if (!gathered_.empty() &&
        gathered_.size() >= members_.size() - closed_.size()) {
      SendGathered();
    }
  }
  // Every message in flight and the one being gathered fail with `why`.
  void FailAll(const absl::Status& why) {
    for (const auto& message : flying_) message->outcome = why;
    flying_.clear();
    if (open_ != nullptr) open_->outcome = why;
    open_.reset();
    open_request_.reset();
    gathered_.clear();
  }

  ClientImpl* const client_;
  const ClientShared shared_;
  const StreamApi api_;
  std::unique_ptr<client_internal::DecodeStream> stream_;
  bool ended_ = false;
  int64_t generation_ = 0;
  // Its sessions not destroyed, and those of them that are closed.
  absl::flat_hash_set<Session::Impl*> members_;
  absl::flat_hash_set<const Session::Impl*> closed_;
  // The message being gathered (null: none), its request, its deadline
  // (the smallest step deadline in it) and the sessions that gathered a
  // step since the last message was sent, locally decided ones included.
  std::shared_ptr<client_internal::BatchMessage> open_;
  std::unique_ptr<v1::DecodeRequest> open_request_;
  absl::Duration open_deadline_ = absl::InfiniteDuration();
  absl::flat_hash_set<const Session::Impl*> gathered_;
  // Sent and not yet answered, oldest first.
  std::deque<std::shared_ptr<client_internal::BatchMessage>> flying_;
  // Messages made, for RecycledMessage().
  std::vector<std::shared_ptr<client_internal::BatchMessage>> made_;
  // Step()'s sessions seen.
  absl::flat_hash_set<const Session*> step_seen_;
};

class ClientImpl final : public Client {
 public:
  ClientImpl(const ClientOptions& options,
             std::shared_ptr<grpc::Channel> channel)
      : options_(options) {
    shared_.stub =
        std::shared_ptr<v1::EntroKv::Stub>(v1::EntroKv::NewStub(channel));
    shared_.channel = std::move(channel);
    shared_.connection =
        std::make_shared<client_internal::ConnectionWatch>(shared_.channel);
    shared_.watchdog = std::make_shared<client_internal::DeadlineWatchdog>();
    shared_.totals = std::make_shared<client_internal::CounterTotals>();
    shared_.health = std::make_shared<client_internal::HealthWatch>();
    shared_.log = std::make_shared<client_internal::StateLog>(options.log);
    shared_.rpc_deadline = options.rpc_deadline;
  }

  // Background calls of this client's sessions that ended hold references
  // to its channel: they go here, on the engine's thread.
  ~ClientImpl() override { client_internal::SweepBackgroundCalls(); }

  const ClientOptions& options() const override { return options_; }

  SessionCounters counters() const override {
    return shared_.totals->Snapshot();
  }

  ClientMetrics metrics() const override { return shared_.totals->Metrics(); }

  absl::StatusOr<std::unique_ptr<Session>> CreateSession(
      const SessionConfig& config, const SessionOptions& options,
      std::string_view session_id) override {
    return CreateSessionOn(config, options, session_id, nullptr);
  }

  std::unique_ptr<DecodeBatch> CreateBatch(StreamApi api) override {
    return std::make_unique<DecodeBatchImpl>(this, shared_, api);
  }

  // Creates a server session and attaches it to a stream of its own, or to
  // `batch`'s, all within options.create_deadline. A server-side failure
  // gives an offline session when options.offline_when_unavailable.
  absl::StatusOr<std::unique_ptr<Session>> CreateSessionOn(
      const SessionConfig& config, const SessionOptions& options,
      std::string_view session_id, DecodeBatchImpl* batch) {
    absl::Status valid = ValidateSessionConfig(config);
    if (!valid.ok()) return valid;
    // A bad projection is the caller's error: say so before any RPC.
    absl::StatusOr<Sketcher> sketcher =
        Sketcher::Create(config, options.projection);
    if (!sketcher.ok()) return sketcher.status();
    const absl::Time deadline = absl::Now() + options.create_deadline;
    auto offline_or_error = [&](const absl::Status& status)
        -> absl::StatusOr<std::unique_ptr<Session>> {
      if (!options.offline_when_unavailable) return status;
      return std::make_unique<Session>(
          std::make_unique<Session::Impl>(shared_, config, options, status));
    };
    absl::StatusOr<CreatedSession> created =
        CreateServerSession(shared_, config, options.shadowing, session_id,
                            deadline);
    if (!created.ok()) {
      if (!IsServerSideFailure(created.status())) return created.status();
      return offline_or_error(Prefixed("CreateSession: ", created.status()));
    }
    absl::StatusOr<std::unique_ptr<Session>> session =
        Open(created->id, config, created->config, options, options.first_step,
             /*steps_done=*/0, {}, batch, deadline);
    if (!session.ok()) {
      // Do not leave a session no stream can reach until the idle timeout;
      // do not wait for the server either.
      CloseInBackground(shared_.stub, created->id, shared_.rpc_deadline);
      // The server accepted the config: a failed attach is never the
      // caller's fault.
      return offline_or_error(Prefixed("attach: ", session.status()));
    }
    return session;
  }

  absl::StatusOr<std::unique_ptr<Session>> Attach(
      std::string_view session_id, const SessionOptions& options,
      absl::Span<const uint64_t> live_slots) override {
    const absl::Time deadline = absl::Now() + options.create_deadline;
    absl::StatusOr<SessionInfo> info = GetSessionUntil(session_id, deadline);
    if (!info.ok()) return info.status();
    const uint64_t first_step = info->stats.last_step.has_value()
                                    ? *info->stats.last_step + 1
                                    : options.first_step;
    return Open(info->id, info->config, info->config, options, first_step,
                info->stats.steps, live_slots, nullptr, deadline);
  }

  absl::StatusOr<SessionInfo> GetSession(std::string_view session_id) override {
    return GetSessionUntil(session_id, absl::Now() + options_.rpc_deadline);
  }

  absl::StatusOr<std::vector<SessionInfo>> ListSessions(
      ServerInfo* server) override {
    v1::ListSessionsRequest request;
    v1::ListSessionsResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    absl::Status status =
        FromGrpc(shared_.stub->ListSessions(&context, request, &response));
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
      server->max_shadows = s.max_shadows();
      server->max_shadow_reference_bytes = s.max_shadow_reference_bytes();
    }
    return sessions;
  }

  absl::Status CloseSession(std::string_view session_id) override {
    v1::CloseSessionRequest request;
    request.set_session_id(std::string(session_id));
    v1::CloseSessionResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    return FromGrpc(shared_.stub->CloseSession(&context, request, &response));
  }

 private:
  void SetDeadline(grpc::ClientContext* context) const {
    context->set_deadline(
        absl::ToChronoTime(absl::Now() + options_.rpc_deadline));
  }

  absl::StatusOr<SessionInfo> GetSessionUntil(std::string_view session_id,
                                              absl::Time deadline) {
    v1::GetSessionRequest request;
    request.set_session_id(std::string(session_id));
    v1::GetSessionResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    absl::Status status =
        FromGrpc(shared_.stub->GetSession(&context, request, &response));
    if (!status.ok()) return status;
    return InfoFromProto(response.session());
  }

  // Opens a Decode stream (or uses `batch`'s) and attaches `id` to it,
  // waiting until `deadline` at most.
  absl::StatusOr<std::unique_ptr<Session>> Open(
      const std::string& id, const SessionConfig& requested,
      const SessionConfig& effective, const SessionOptions& options,
      uint64_t first_step, int64_t steps_done, absl::Span<const uint64_t> live,
      DecodeBatchImpl* batch, absl::Time deadline) {
    std::unique_ptr<client_internal::DecodeStream> stream;
    if (batch == nullptr) stream = OpenStream(shared_, options.stream_api);
    // A batch first reads the answers to its messages in flight (each within
    // its own step deadline); the attach's time starts after them.
    const absl::Time drain_start = absl::Now();
    client_internal::DecodeStream* via =
        batch == nullptr ? stream.get() : batch->LiveStream();
    absl::Status attached =
        AttachOn(via, id, deadline + (absl::Now() - drain_start));
    if (!attached.ok()) {
      // A late answer to the attach must not be read as a step's.
      if (batch != nullptr) batch->EndStream();
      return attached;
    }
    auto impl =
        std::make_unique<Session::Impl>(shared_, id, requested, effective,
                                        options, first_step, std::move(stream));
    impl->SeedLive(live);
    impl->SetStepsDone(steps_done);
    if (batch != nullptr) impl->SetBatch(batch);
    return std::make_unique<Session>(std::move(impl));
  }

  ClientOptions options_;
  ClientShared shared_;
};

absl::StatusOr<std::unique_ptr<Session>> DecodeBatchImpl::CreateSession(
    const SessionConfig& config, const SessionOptions& options,
    std::string_view session_id) {
  absl::StatusOr<std::unique_ptr<Session>> session =
      client_->CreateSessionOn(config, options, session_id, this);
  // An offline session has no stream; it still steps through the batch.
  if (session.ok()) {
    (*session)->impl()->SetBatch(this);
    members_.insert((*session)->impl());
  }
  return session;
}

std::vector<absl::StatusOr<StepOutcome>> DecodeBatchImpl::Step(
    absl::Span<const BatchStep> steps) {
  std::vector<absl::StatusOr<StepOutcome>> out(
      steps.size(), absl::InternalError("entrokv: not stepped"));
  // The steps the per-session calls gathered go first, in their own
  // message.
  SendGathered();
  std::vector<bool> gathered(steps.size(), false);
  // step_seen_ is a member, so that it keeps its capacity (it grows seven
  // times for 64 sessions). Only this loop uses it: it calls no engine code.
  step_seen_.clear();
  for (size_t i = 0; i < steps.size(); ++i) {
    Session* session = steps[i].session;
    if (session == nullptr || session->impl()->batch() != this) {
      out[i] = absl::InvalidArgumentError(absl::StrCat(
          "steps[", i, "].session: not a session of this DecodeBatch"));
      continue;
    }
    if (!step_seen_.insert(session).second) {
      out[i] = absl::InvalidArgumentError(
          absl::StrCat("steps[", i, "].session: appears twice in the batch"));
      continue;
    }
    absl::Status status = session->impl()->StepBatched(steps[i].request);
    if (!status.ok()) {
      out[i] = status;
      continue;
    }
    gathered[i] = true;
  }
  SendGathered();
  for (size_t i = 0; i < steps.size(); ++i) {
    if (gathered[i]) out[i] = steps[i].session->impl()->Collect();
  }
  return out;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    const ClientOptions& options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("target: empty");
  }
  const struct {
    const char* name;
    absl::Duration value;
  } durations[] = {
      {"reconnect_initial_backoff", options.reconnect_initial_backoff},
      {"reconnect_max_backoff", options.reconnect_max_backoff},
      {"connect_timeout", options.connect_timeout},
  };
  for (const auto& [name, value] : durations) {
    if (value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": ", absl::FormatDuration(value), " is not positive"));
    }
  }
  if (options.reconnect_max_backoff < options.reconnect_initial_backoff) {
    return absl::InvalidArgumentError(
        absl::StrCat("reconnect_max_backoff: ",
                     absl::FormatDuration(options.reconnect_max_backoff),
                     " is below reconnect_initial_backoff ",
                     absl::FormatDuration(options.reconnect_initial_backoff)));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              Milliseconds(options.reconnect_initial_backoff));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              Milliseconds(options.reconnect_max_backoff));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              Milliseconds(options.connect_timeout));
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentials(options);
  if (!credentials.ok()) return credentials.status();
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!options.bearer_token.empty()) {
    interceptors.push_back(
        std::make_unique<BearerTokenInterceptorFactory>(options.bearer_token));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      options.target, *credentials, args, std::move(interceptors));
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateChannel(options);
  if (!channel.ok()) return channel.status();
  if (absl::StatusOr<std::optional<absl::Duration>> deadline =
          client_internal::StepDeadlineFromEnvironment();
      !deadline.ok()) {
    return deadline.status();
  }
  return std::unique_ptr<Client>(new ClientImpl(options, *std::move(channel)));
}

}  // namespace entrokv
