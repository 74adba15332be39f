#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "entrokv/core/session.h"
#include "proto/convert/config_convert.h"
#include "server/status_conversion.h"
#include "spdlog/spdlog.h"

namespace entrokv::server {
namespace {

using proto::FromProto;
using proto::ToProto;

static_assert(sizeof(bool) == 1, "pinned flags are read as bytes");

void FillInfo(const SessionSnapshot& snapshot, v1::SessionInfo* out) {
  out->set_session_id(snapshot.id);
  ToProto(snapshot.config, out->mutable_config());
  ToProto(snapshot.stats, out->mutable_stats());
  out->set_attached(snapshot.attached);
  out->set_idle_ms(absl::ToInt64Milliseconds(snapshot.idle));
}

absl::Status RequireSessionId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("session_id: empty");
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// One Decode stream. Reads and writes strictly alternate (a request is read
// only after the previous response was written), so at most one of this
// reactor's callbacks runs at a time and `attached_` needs no lock.
//
// A session closed (or reclaimed) while this stream holds it keeps its state
// alive through `attached_`: the stream alone may touch that state, so it
// alone frees it, at the start of the next message it handles (or when it
// ends). A closed session therefore holds its bytes for at most one message.
class DecodeReactor final
    : public grpc::ServerBidiReactor<v1::DecodeRequest, v1::DecodeResponse> {
 public:
  DecodeReactor(SessionRegistry* registry, std::string peer)
      : registry_(registry), peer_(std::move(peer)) {
    spdlog::debug("decode stream from {} opened", peer_);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed or the call was cancelled. Sessions are
      // released before the status goes out, so that a client that has seen
      // the stream end can attach them elsewhere at once.
      DetachAll();
      Finish(grpc::Status::OK);
      return;
    }
    Handle();
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      DetachAll();
      Finish(ToGrpcStatus(absl::CancelledError("decode stream broken")));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override {
    DetachAll();
    spdlog::debug("decode stream from {} ended after {} steps", peer_, steps_);
    delete this;
  }

 private:
  void DetachAll() {
    for (auto& [id, entry] : attached_) registry_->Detach(*entry, this);
    attached_.clear();
  }

  // Lets go of the sessions closed since the last message, freeing their
  // state (see the class comment).
  void ReleaseClosed() {
    for (auto it = attached_.begin(); it != attached_.end();) {
      if (it->second->closed()) {
        registry_->Detach(*it->second, this);
        attached_.erase(it++);
      } else {
        ++it;
      }
    }
  }

  void Handle() {
    ReleaseClosed();
    response_.Clear();
    for (int i = 0; i < request_.attach_size(); ++i) {
      v1::AttachResult* result = response_.add_attach_results();
      result->set_session_id(request_.attach(i));
      const absl::Status status = Attach(request_.attach(i));
      if (!status.ok()) {
        ToProtoStatus(PrefixMessage(absl::StrCat("attach[", i, "]."), status),
                      result->mutable_status());
      }
    }
    for (int i = 0; i < request_.steps_size(); ++i) {
      const v1::SessionStep& step = request_.steps(i);
      v1::SessionStepResult* result = response_.add_results();
      result->set_session_id(step.session_id());
      result->set_step(step.step());
      const absl::Status status = RunStep(step, result);
      if (!status.ok()) {
        result->clear_evicted();
        result->clear_live();
        result->clear_budget();
        result->clear_entropy();
        ToProtoStatus(PrefixMessage(absl::StrCat("steps[", i, "]."), status),
                      result->mutable_status());
        spdlog::debug("step {} of session {} rejected: {}", step.step(),
                      step.session_id(), result->status().message());
      }
    }
    for (int i = 0; i < request_.detach_size(); ++i) {
      v1::AttachResult* result = response_.add_detach_results();
      result->set_session_id(request_.detach(i));
      const absl::Status status = Detach(request_.detach(i));
      if (!status.ok()) {
        ToProtoStatus(PrefixMessage(absl::StrCat("detach[", i, "]."), status),
                      result->mutable_status());
      }
    }
  }

  absl::Status Attach(const std::string& id) {
    if (absl::Status status = RequireSessionId(id); !status.ok()) return status;
    absl::StatusOr<std::shared_ptr<SessionEntry>> entry =
        registry_->Attach(id, this);
    if (!entry.ok()) return entry.status();
    std::shared_ptr<SessionEntry>& held = attached_[id];
    // A session of this id closed since the last message, and a new one
    // created under the same id: let go of the old one.
    if (held != nullptr && held != *entry) registry_->Detach(*held, this);
    held = *std::move(entry);
    return absl::OkStatus();
  }

  absl::Status Detach(const std::string& id) {
    if (absl::Status status = RequireSessionId(id); !status.ok()) return status;
    auto it = attached_.find(id);
    if (it == attached_.end()) {
      if (registry_->Get(id).ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "session_id: session ", id, " is not attached to this stream"));
      }
      return absl::NotFoundError(
          absl::StrCat("session_id: no open session ", id));
    }
    const bool closed = it->second->closed();
    registry_->Detach(*it->second, this);
    attached_.erase(it);
    if (closed) {
      return absl::NotFoundError(
          absl::StrCat("session_id: session ", id, " was closed"));
    }
    return absl::OkStatus();
  }

  absl::Status RunStep(const v1::SessionStep& step,
                       v1::SessionStepResult* out) {
    auto it = attached_.find(step.session_id());
    if (it == attached_.end()) {
      if (registry_->Get(step.session_id()).ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("session_id: session ", step.session_id(),
                         " is not attached to this stream; attach it first"));
      }
      return absl::NotFoundError(
          absl::StrCat("session_id: no open session ", step.session_id()));
    }
    SessionEntry& entry = *it->second;
    if (entry.closed()) {
      // Closed (or reclaimed) since it was attached: let go of its state.
      registry_->Detach(entry, this);
      attached_.erase(it);
      return absl::NotFoundError(absl::StrCat(
          "session_id: session ", step.session_id(), " was closed"));
    }

    StepInput input;
    input.step = step.step();
    const v1::Append& append = step.append();
    input.append.slot_ids =
        absl::MakeConstSpan(append.slot_ids().data(), append.slot_ids_size());
    input.append.pinned = absl::MakeConstSpan(
        reinterpret_cast<const uint8_t*>(append.pinned().data()),
        append.pinned_size());
    input.append.keys = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(append.keys().data()),
        append.keys().size());
    input.queries = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(step.queries().data()),
        step.queries().size());
    switch (step.entropy_source_case()) {
      case v1::SessionStep::kEntropy:
        input.entropy = step.entropy();
        break;
      case v1::SessionStep::kLogits:
        if (step.logits().values_size() == 0) {
          return absl::InvalidArgumentError("logits: empty");
        }
        input.logits = absl::MakeConstSpan(step.logits().values().data(),
                                           step.logits().values_size());
        break;
      case v1::SessionStep::ENTROPY_SOURCE_NOT_SET:
        break;
    }

    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = entry.state().Step(input, &result_);
    const auto end = std::chrono::steady_clock::now();
    if (!status.ok()) return status;
    entry.PublishStats();
    ++steps_;

    out->mutable_evicted()->Reserve(static_cast<int>(result_.evicted.size()));
    for (const uint64_t slot : result_.evicted) out->add_evicted(slot);
    out->set_live(result_.live);
    out->set_budget(result_.budget);
    out->set_entropy(result_.entropy);
    out->set_compute_ns(
        std::chrono::duration_cast<std::chrono::nanoseconds>(end - start)
            .count());
    return absl::OkStatus();
  }

  SessionRegistry* const registry_;
  const std::string peer_;
  v1::DecodeRequest request_;
  v1::DecodeResponse response_;
  StepResult result_;  // Reused across steps.
  int64_t steps_ = 0;
  absl::flat_hash_map<std::string, std::shared_ptr<SessionEntry>> attached_;
};

// Room left in a reply of `reply_bytes` for the EchoMessage's own framing (a
// tag and a length varint: at most 6 bytes) and gRPC's (a 5-byte prefix),
// with margin.
constexpr int64_t kEchoOverheadBytes = 64;

// Echo: answers each message with one message and does nothing else.
class EchoReactor final
    : public grpc::ServerBidiReactor<v1::EchoMessage, v1::EchoMessage> {
 public:
  explicit EchoReactor(int64_t max_message_bytes)
      : max_message_bytes_(max_message_bytes) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    if (request_.has_reply_bytes()) {
      // The reply must fit the send limit whole, framing included; past it
      // gRPC would end the stream CANCELLED instead.
      const int64_t most =
          std::max<int64_t>(0, max_message_bytes_ - kEchoOverheadBytes);
      if (max_message_bytes_ > 0 && int64_t{request_.reply_bytes()} > most) {
        Finish(ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
            "reply_bytes: ", request_.reply_bytes(),
            " does not fit the server's max message size ", max_message_bytes_,
            " (at most ", most, " payload bytes)"))));
        return;
      }
      reply_.mutable_payload()->assign(request_.reply_bytes(), '\0');
    } else {
      reply_.mutable_payload()->swap(*request_.mutable_payload());
    }
    StartWrite(&reply_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(ToGrpcStatus(absl::CancelledError("echo stream broken")));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const int64_t max_message_bytes_;
  v1::EchoMessage request_;
  v1::EchoMessage reply_;
};

}  // namespace

grpc::ServerUnaryReactor* EntroKvService::CreateSession(
    grpc::CallbackServerContext* context,
    const v1::CreateSessionRequest* request,
    v1::CreateSessionResponse* response) {
  SessionConfig config;
  if (absl::Status status = FromProto(request->config(), &config);
      !status.ok()) {
    return FinishUnary(context, status);
  }
  absl::StatusOr<SessionSnapshot> snapshot = registry_->Create(
      config, request->session_id(), request->config().placement_fallback());
  if (!snapshot.ok()) {
    spdlog::warn("CreateSession from {} rejected: {}", context->peer(),
                 snapshot.status().ToString());
    return FinishUnary(context, snapshot.status());
  }
  response->set_session_id(snapshot->id);
  FillInfo(*snapshot, response->mutable_session());
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EntroKvService::CloseSession(
    grpc::CallbackServerContext* context,
    const v1::CloseSessionRequest* request,
    v1::CloseSessionResponse* response) {
  if (absl::Status status = RequireSessionId(request->session_id());
      !status.ok()) {
    return FinishUnary(context, status);
  }
  absl::StatusOr<SessionSnapshot> snapshot =
      registry_->Close(request->session_id());
  if (!snapshot.ok()) return FinishUnary(context, snapshot.status());
  FillInfo(*snapshot, response->mutable_session());
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EntroKvService::GetSession(
    grpc::CallbackServerContext* context, const v1::GetSessionRequest* request,
    v1::GetSessionResponse* response) {
  if (absl::Status status = RequireSessionId(request->session_id());
      !status.ok()) {
    return FinishUnary(context, status);
  }
  absl::StatusOr<SessionSnapshot> snapshot =
      registry_->Get(request->session_id());
  if (!snapshot.ok()) return FinishUnary(context, snapshot.status());
  FillInfo(*snapshot, response->mutable_session());
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* EntroKvService::ListSessions(
    grpc::CallbackServerContext* context,
    const v1::ListSessionsRequest* request,
    v1::ListSessionsResponse* response) {
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
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerBidiReactor<v1::DecodeRequest, v1::DecodeResponse>*
EntroKvService::Decode(grpc::CallbackServerContext* context) {
  return new DecodeReactor(registry_, context->peer());
}

grpc::ServerBidiReactor<v1::EchoMessage, v1::EchoMessage>* EntroKvService::Echo(
    grpc::CallbackServerContext* context) {
  return new EchoReactor(limits_.max_message_bytes);
}

}  // namespace entrokv::server
