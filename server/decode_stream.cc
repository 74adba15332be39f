#include "server/decode_stream.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "entrokv/core/session.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/repeated_field.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "proto/convert/config_convert.h"
#include "proto/convert/shadow_convert.h"
#include "server/log_format.h"
#include "server/raw_messages.h"
#include "server/status_conversion.h"
#include "server/step_input.h"
#include "spdlog/spdlog.h"


namespace entrokv::server {
namespace {

using ::google::protobuf::internal::WireFormatLite;
using proto::FromProto;
using proto::ToProto;

// Session ids a status or log line names before "and N more".
constexpr size_t kIdsNamed = 8;

std::string NameIds(const std::vector<std::string>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < kIdsNamed; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", ids[i]);
  }
  if (ids.size() > kIdsNamed) {
    absl::StrAppend(&out, " and ", ids.size() - kIdsNamed, " more");
  }
  return out;
}

// One Decode stream. Reads and writes strictly alternate (a request is read
// only after the previous response was written), so at most one of this
// handler's calls runs at a time and `attached_` needs no lock.
//
// A session closed (or reclaimed) while this stream holds it keeps its state
// alive through `attached_`: the stream alone may touch that state, so it
// alone frees it, at the start of the next message it handles (or when it
// ends). A closed session therefore holds its bytes for at most one message.
//
// Work per message is bounded before any of it is done: the request's
// top-level entries are counted on the raw bytes (CheckCounts()), and the
// steps of each session counted before the first step runs.
class DecodeStream final : public StreamHandler {
 public:
  // `open_streams` was incremented for this stream; the destructor
  // decrements it.
  DecodeStream(SessionRegistry* registry, const ServiceLimits& limits,
               ServerMetrics* metrics, std::atomic<int64_t>* open_streams,
               StepPool* pool, std::string peer)
      : registry_(registry),
        limits_(limits),
        metrics_(metrics),
        open_streams_(open_streams),
        pool_(pool),
        peer_(std::move(peer)) {
    spdlog::debug("decode stream from {} opened", peer_);
  }

  ~DecodeStream() override {
    DetachAll();
    open_streams_->fetch_sub(1, std::memory_order_relaxed);
    spdlog::debug("decode stream from {} ended after {} steps", peer_, steps_);
  }

  grpc::Status OnMessage(grpc::ByteBuffer* request,
                         grpc::ByteBuffer* reply) override {
    ++messages_;
    absl::Status status = Handle(request);
    request->Clear();
    if (status.ok()) status = SerializeMessage(response_, reply);
    if (!status.ok()) return End(status);
    return grpc::Status::OK;
  }

  // The reply is out: the shadows' work for its steps runs now, before the
  // next message is read.
  void OnReplyWritten() override { RunShadows(); }

  grpc::Status OnReadsDone() override {
    // The client half-closed or the call was cancelled. Sessions are
    // released before the status goes out, so that a client that has seen
    // the stream end can attach them elsewhere at once.
    DetachAll();
    return grpc::Status::OK;
  }

  grpc::Status OnWriteFailed() override {
    DetachAll();
    return ToGrpcStatus(absl::CancelledError("decode stream broken"));
  }

 private:
  // A step whose shadows have yet to see it: its session, the step (viewing
  // `request_`) and the session's answer.
  struct ShadowWork {
    std::shared_ptr<SessionEntry> entry;
    int step_index = 0;
    std::vector<uint64_t> evicted;
    // The session's demote-tier moves (docs/step-semantics.md section 12):
    // the shadows' view of its live set follows them.
    std::vector<uint64_t> demoted;
    std::vector<uint64_t> promoted;
    int64_t budget = 0;
  };

  // What a message's steps of one session share: one task of the pool.
  struct SessionInMessage {
    absl::string_view id;  // Views request_.
    // Its steps: step_order_[first, first + count), indices into
    // request_.steps() in request order.
    int first = 0;
    int count = 0;
    absl::Status refused;    // Not OK: why none of its steps may run.
    std::shared_ptr<SessionEntry> entry;  // Held by this stream, when OK.
    bool closed = false;  // Found closed: let go once the message is done.
  };

  // What one step came to, written by the task that ran it.
  struct StepOutcome {
    absl::Status status;
    std::optional<ShadowWork> shadow;  // When its session has shadows.
  };

  // Runs the shadows' work of the steps answered since the last call, in
  // order, and publishes their stats. Called once a reply is written, and
  // before a session is let go (so that no other stream steps it first).
  void RunShadows() {
    for (ShadowWork& work : shadow_work_) {
      EntryShadows& shadows = *work.entry->shadows();
      StepInput input;
      if (!ToStepInput(request_.steps(work.step_index), &input).ok()) continue;
      StepResult answered;
      answered.evicted = std::move(work.evicted);
      answered.demoted = std::move(work.demoted);
      answered.promoted = std::move(work.promoted);
      answered.budget = work.budget;
      if (shadows.set->Observe(input, answered, &step_recall_)) {
        if (shadows.recall.empty()) {
          shadows.recall = RecallHistograms(*work.entry);
        }
        metrics_->ObserveRecall(shadows.recall[0], step_recall_.primary);
        metrics_->ObserveRecall(shadows.recall[1], step_recall_.oracle);
        for (size_t i = 0; i < step_recall_.shadows.size(); ++i) {
          metrics_->ObserveRecall(shadows.recall[2 + i],
                                  step_recall_.shadows[i]);
        }
      }
      work.entry->PublishShadowStats();
    }
    shadow_work_.clear();
  }

  // The session's, the oracle's and each shadow's recall histogram.
  std::vector<DurationHistogram*> RecallHistograms(SessionEntry& entry) {
    const ShadowStats stats = entry.shadows()->set->Stats();
    std::vector<DurationHistogram*> out;
    out.push_back(metrics_->RecallHistogram("session", stats.primary.policy));
    out.push_back(metrics_->RecallHistogram("oracle", "oracle"));
    for (const PolicyReport& r : stats.shadows) {
      out.push_back(metrics_->RecallHistogram("shadow", r.policy));
    }
    return out;
  }

  // Lets go of every session; returns the ids of those still open.
  std::vector<std::string> DetachAll() {
    RunShadows();
    std::vector<std::string> ids;
    for (auto& [id, entry] : attached_) {
      if (!entry->closed()) ids.push_back(id);
      registry_->Detach(*entry, this);
    }
    attached_.clear();
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  // The status the stream ends with for `why`, after detaching its sessions;
  // the status and a warning say which.
  grpc::Status End(const absl::Status& why) {
    const std::vector<std::string> ids = DetachAll();
    const absl::Status status(
        why.code(),
        absl::StrCat(why.message(), " (message ", messages_,
                     " of the stream); the stream ends",
                     ids.empty()
                         ? ""
                         : absl::StrCat(" and its sessions ", NameIds(ids),
                                        " were detached")));
    spdlog::warn("decode stream from {}: {}", peer_, status.ToString());
    metrics_->Rejected(kDecode, why);
    return ToGrpcStatus(status);
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

  // Counts the request's attach, steps and detach entries on the raw bytes,
  // stopping at the first list past the limit, so that an over-long message
  // costs at most `max_steps_per_message` skipped entries per list. Bytes
  // that are not a protobuf message are left to the parse that follows.
  absl::Status CheckCounts(grpc::ByteBuffer* request) {
    const int64_t max = limits_.max_steps_per_message;
    if (!request->Valid()) return absl::OkStatus();
    grpc::ProtoBufferReader reader(request);
    if (!reader.status().ok()) return absl::OkStatus();
    google::protobuf::io::CodedInputStream input(&reader);
    constexpr const char* kLists[] = {"", "attach", "steps", "detach"};
    int64_t counts[4] = {0, 0, 0, 0};
    for (uint32_t tag = input.ReadTag(); tag != 0; tag = input.ReadTag()) {
      const int field = WireFormatLite::GetTagFieldNumber(tag);
      if (field >= 1 && field <= 3 && ++counts[field] > max) {
        return absl::ResourceExhaustedError(absl::StrCat(
            kLists[field], ": more than ", max,
            " entries in one DecodeRequest, the server's limit "
            "(--max_steps_per_message); none of the message was run"));
      }
      if (!WireFormatLite::SkipField(&input, tag)) break;
    }
    return absl::OkStatus();
  }

  // Not OK: the stream must end with this status.
  absl::Status Handle(grpc::ByteBuffer* request) {
    if (absl::Status status = CheckCounts(request); !status.ok()) {
      return status;
    }
    if (absl::Status status = ParseReusing(request, &request_);
        !status.ok()) {
      return status;
    }
    ReleaseClosed();
    response_.Clear();
    AnswerEach(request_.attach(), "attach",
               response_.mutable_attach_results(),
               [this](const std::string& id) { return Attach(id); });
    SortStepsBySession();
    const int steps = request_.steps_size();
    outcomes_.assign(static_cast<size_t>(steps), StepOutcome{});
    for (int i = 0; i < steps; ++i) {
      const v1::SessionStep& step = request_.steps(i);
      v1::SessionStepResult* result = response_.add_results();
      result->set_session_id(step.session_id());
      result->set_step(step.step());
    }
    // The sessions' steps, in parallel over sessions (each session's in
    // order, on one thread): every task writes only its own session's state
    // and its steps' results and outcomes.
    pool_->Run(static_cast<int>(groups_.size()),
               [this](int g) { RunGroup(&groups_[g]); });
    for (SessionInMessage& group : groups_) {
      if (!group.closed) continue;
      registry_->Detach(*group.entry, this);
      attached_.erase(group.id);
    }
    for (int i = 0; i < steps; ++i) {
      const v1::SessionStep& step = request_.steps(i);
      v1::SessionStepResult* result = response_.mutable_results(i);
      StepOutcome& outcome = outcomes_[i];
      if (outcome.shadow) shadow_work_.push_back(std::move(*outcome.shadow));
      const absl::Status& status = outcome.status;
      if (status.ok()) {
        ++steps_;
      } else {
        result->clear_evicted();
        result->clear_demoted();
        result->clear_promoted();
        result->clear_live();
        result->clear_budget();
        result->clear_entropy();
        const absl::Status named =
            PrefixMessage(absl::StrCat("steps[", i, "]."), status);
        metrics_->Rejected(kDecode, named);
        ToProtoStatus(named, result->mutable_status());
        const ScopedLogFields fields(step.session_id(), step.step());
        spdlog::debug("step {} of session {} rejected: {}", step.step(),
                      step.session_id(), result->status().message());
      }
    }
    AnswerEach(request_.detach(), "detach",
               response_.mutable_detach_results(),
               [this](const std::string& id) { return Detach(id); });
    // Hold no session past its message: one detached or closed here must be
    // freed when the stream lets go of it, not at its next message.
    groups_.clear();
    group_of_.clear();
    outcomes_.clear();
    return absl::OkStatus();
  }

  // Fills `groups_`: per session of this message (in order of first
  // appearance), its steps and why they may not run (over the per-session
  // limit, or not held by this stream: one look-up per session, not per
  // step).
  void SortStepsBySession() {
    groups_.clear();
    group_of_.clear();
    // Count each session's steps, then lay their indices out session by
    // session in step_order_ (reused: nothing is allocated per message once
    // the buffers have grown).
    const int steps = request_.steps_size();
    step_group_.resize(static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i) {
      const std::string& id = request_.steps(i).session_id();
      auto [it, inserted] =
          group_of_.try_emplace(id, static_cast<int>(groups_.size()));
      if (inserted) {
        groups_.emplace_back();
        groups_.back().id = id;
      }
      ++groups_[it->second].count;
      step_group_[i] = it->second;
    }
    int next = 0;
    for (SessionInMessage& session : groups_) {
      session.first = next;
      next += session.count;
      session.count = 0;
    }
    step_order_.resize(static_cast<size_t>(steps));
    for (int i = 0; i < steps; ++i) {
      SessionInMessage& session = groups_[step_group_[i]];
      step_order_[session.first + session.count++] = i;
    }
    const int64_t max = limits_.max_steps_per_session_per_message;
    for (SessionInMessage& session : groups_) {
      const int64_t count = session.count;
      auto held = attached_.find(session.id);
      if (absl::Status id = RequireSessionId(session.id); !id.ok()) {
        session.refused = id;  // Bad input, as in attach and detach.
      } else if (count > max) {
        session.refused = absl::ResourceExhaustedError(absl::StrCat(
            "session_id: session ", session.id, " has ", count,
            " steps in this message, more than the server's limit of ", max,
            " (--max_steps_per_session_per_message); none of them was run"));
      } else if (held == attached_.end()) {
        session.refused = NotHeld(session.id, "; attach it first");
      } else {
        session.entry = held->second;
      }
    }
  }

  // One task of the pool: the steps of one session, in order.
  void RunGroup(SessionInMessage* group) {
    for (int k = 0; k < group->count; ++k) {
      const int i = step_order_[group->first + k];
      StepOutcome& outcome = outcomes_[i];
      if (!group->refused.ok()) {
        outcome.status = group->refused;
      } else if (group->closed) {
        outcome.status = absl::NotFoundError(
            absl::StrCat("session_id: no open session ", group->id));
      } else {
        outcome.status = RunStep(request_.steps(i), i, group,
                                 response_.mutable_results(i), &outcome);
      }
    }
  }

  // Why session `id`, which this stream does not hold, cannot be used:
  // FailedPrecondition (`hint` appended) when it is open, else NotFound.
  absl::Status NotHeld(absl::string_view id, absl::string_view hint) const {
    if (registry_->Contains(std::string(id))) {
      return absl::FailedPreconditionError(absl::StrCat(
          "session_id: session ", id, " is not attached to this stream", hint));
    }
    return absl::NotFoundError(
        absl::StrCat("session_id: no open session ", id));
  }

  // Applies `apply` to each session id of a request's attach (detach)
  // list, answering each in a result of its own; a failure is named
  // "<list>[i]." and counted.
  template <typename Apply>
  void AnswerEach(
      const google::protobuf::RepeatedPtrField<std::string>& ids,
      absl::string_view list,
      google::protobuf::RepeatedPtrField<v1::AttachResult>* results,
      Apply apply) {
    for (int i = 0; i < ids.size(); ++i) {
      v1::AttachResult* result = results->Add();
      result->set_session_id(ids[i]);
      const absl::Status status = apply(ids[i]);
      if (!status.ok()) {
        const absl::Status named =
            PrefixMessage(absl::StrCat(list, "[", i, "]."), status);
        metrics_->Rejected(kDecode, named);
        ToProtoStatus(named, result->mutable_status());
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
    if (it == attached_.end()) return NotHeld(id, "");
    RunShadows();  // Before another stream may step it.
    const bool closed = it->second->closed();
    registry_->Detach(*it->second, this);
    attached_.erase(it);
    if (closed) {
      return absl::NotFoundError(
          absl::StrCat("session_id: session ", id, " was closed"));
    }
    return absl::OkStatus();
  }

  // Runs one step of `group`'s session (held by this stream). Touches only
  // that session, `out` and `outcome`, and thread-safe metrics, so that the
  // groups of a message run in parallel. Per-thread scratch: the result.
  absl::Status RunStep(const v1::SessionStep& step, int step_index,
                       SessionInMessage* group, v1::SessionStepResult* out,
                       StepOutcome* outcome) {
    SessionEntry& entry = *group->entry;
    if (entry.closed()) {
      // Closed (or reclaimed) since it was attached: Handle() lets go of its
      // state once the message's steps are done.
      group->closed = true;
      return absl::NotFoundError(absl::StrCat(
          "session_id: session ", step.session_id(), " was closed"));
    }
    StepInput input;
    if (absl::Status status = ToStepInput(step, &input);
        !status.ok()) {
      return status;
    }

    thread_local StepResult result;  // This worker's scratch.
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = entry.state().Step(input, &result);
    const auto end = std::chrono::steady_clock::now();
    if (!status.ok()) return status;
    entry.PublishStats();
    if (entry.shadows() != nullptr) {
      outcome->shadow =
          ShadowWork{group->entry,   step_index,      result.evicted,
                     result.demoted, result.promoted, result.budget};
    }
    metrics_->StepDone(
        std::chrono::duration_cast<std::chrono::nanoseconds>(end - start)
            .count(),
        static_cast<int64_t>(result.evicted.size()),
        static_cast<int64_t>(result.demoted.size()),
        static_cast<int64_t>(result.promoted.size()));

    out->mutable_evicted()->Reserve(static_cast<int>(result.evicted.size()));
    for (const uint64_t slot : result.evicted) out->add_evicted(slot);
    // Empty without a tier: the fields are then absent on the wire.
    if (!result.demoted.empty()) {
      out->mutable_demoted()->Add(result.demoted.begin(), result.demoted.end());
    }
    if (!result.promoted.empty()) {
      out->mutable_promoted()->Add(result.promoted.begin(),
                                   result.promoted.end());
    }
    out->set_live(result.live);
    out->set_budget(result.budget);
    out->set_entropy(result.entropy);
    out->set_deferred(result.deferred);
    out->set_compute_ns(
        std::chrono::duration_cast<std::chrono::nanoseconds>(end - start)
            .count());
    return absl::OkStatus();
  }

  SessionRegistry* const registry_;
  const ServiceLimits& limits_;
  ServerMetrics* const metrics_;
  std::atomic<int64_t>* const open_streams_;
  StepPool* const pool_;
  const std::string peer_;
  v1::DecodeRequest request_;
  v1::DecodeResponse response_;
  // Steps of the message in `request_` whose shadows have yet to run.
  std::vector<ShadowWork> shadow_work_;
  StepRecall step_recall_;  // Reused.
  int64_t steps_ = 0;
  int64_t messages_ = 0;
  absl::flat_hash_map<std::string, std::shared_ptr<SessionEntry>> attached_;
  // The message's sessions and steps; valid while one message is handled.
  std::vector<SessionInMessage> groups_;
  absl::flat_hash_map<absl::string_view, int> group_of_;  // Views request_.
  std::vector<int> step_group_;  // Per step: its index in groups_.
  std::vector<int> step_order_;  // Step indices, grouped by session.
  std::vector<StepOutcome> outcomes_;  // Per step, in request order.
};

}  // namespace

std::unique_ptr<StreamHandler> NewDecodeStream(
    SessionRegistry* registry, const ServiceLimits& limits,
    ServerMetrics* metrics, std::atomic<int64_t>* open_streams,
    StepPool* pool, std::string peer) {
  return std::make_unique<DecodeStream>(registry, limits, metrics,
                                        open_streams, pool, std::move(peer));
}

}  // namespace entrokv::server
