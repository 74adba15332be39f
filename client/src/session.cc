#include "entrokv/client/session.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "convert.h"
#include "entrokv/core/entropy.h"
#include "session_impl.h"

namespace entrokv {
namespace {

std::optional<Sketcher> MakeSketcher(const SessionConfig& config,
                                     const SessionOptions& options,
                                     absl::Status* status) {
  absl::StatusOr<Sketcher> sketcher =
      Sketcher::Create(config, options.projection);
  if (!sketcher.ok()) {
    *status = sketcher.status();
    return std::nullopt;
  }
  return *std::move(sketcher);
}

// The view's elements as floats, decoded in place (no temporary buffer).
void ToFloats(const VectorView& view, std::vector<float>* out) {
  out->resize(view.size());
  DecodeElements(view.type(), view.bytes(), view.size(), out->data());
}

// Seeds a session's jitter: sessions created at once differ by address.
uint32_t RandomSeed(const void* session) {
  return static_cast<uint32_t>(
      absl::ToUnixNanos(absl::Now()) ^
      static_cast<int64_t>(reinterpret_cast<uintptr_t>(session)));
}

StreamingRule RuleFor(const SessionConfig& config) {
  StreamingRule rule;
  rule.budget = std::max<int64_t>(config.budget, 1);
  rule.sinks = std::max(config.protection.sinks, config.streaming_sinks);
  rule.recent = config.protection.recent;
  rule.block_size = std::max(config.block_size, 1);
  return rule;
}

}  // namespace

Session::Impl::Impl(client_internal::ClientShared shared, std::string id,
                    const SessionConfig& requested,
                    const SessionConfig& effective,
                    const SessionOptions& options, uint64_t first_step,
                    std::unique_ptr<client_internal::DecodeStream> stream)
    : shared_(std::move(shared)),
      id_(std::move(id)),
      requested_(requested),
      config_(effective),
      options_(options),
      rule_(RuleFor(effective)),
      stream_(std::move(stream)),
      next_step_(first_step),
      first_step_(first_step),
      sketcher_(MakeSketcher(effective, options, &sketcher_status_)),
      recovery_wait_(options.recovery_interval),
      random_(RandomSeed(this)) {}

Session::Impl::Impl(client_internal::ClientShared shared,
                    const SessionConfig& requested,
                    const SessionOptions& options, absl::Status why)
    : shared_(std::move(shared)),
      requested_(requested),
      config_(requested),
      options_(options),
      rule_(RuleFor(requested)),
      next_step_(options.first_step),
      first_step_(options.first_step),
      sketcher_(MakeSketcher(requested, options, &sketcher_status_)),
      degraded_(true),
      degraded_reason_(std::move(why)),
      offline_(true),
      recovery_wait_(options.recovery_interval),
      random_(RandomSeed(this)) {
  next_recovery_ = absl::Now() + Jittered(recovery_wait_);
  WatchHealth();
  shared_.log->Offline(degraded_reason_, options_.live_keys != nullptr);
  const SessionCounters before = counters_;
  counters_.offline_sessions = 1;
  shared_.totals->AddDelta(before, counters_);
}

Session::Impl::~Impl() {
  if (batch_ != nullptr) batch_->Leave(this);
}

bool Session::Impl::NextStepDecides(int64_t appended) const {
  const int32_t every = config_.decide_every;
  if (every <= 1) return true;
  const int64_t accepted =
      steps_done_ + static_cast<int64_t>(next_step_ - first_step_);
  if ((accepted + 1) % every == 0) return true;
  // The client's live count is an upper bound of the server's (evictions of
  // steps in flight only lower it).
  return config_.hard_ceiling > 0 &&
         static_cast<int64_t>(live_.size()) + appended > config_.hard_ceiling;
}

absl::Status Session::Impl::Validate(const StepRequest& request,
                                     double* entropy, bool* has_entropy) const {
  if (!sketcher_.has_value()) return sketcher_status_;
  const size_t n = request.slot_ids.size();
  const size_t key_elements =
      static_cast<size_t>(sketcher_->full_key_elements());
  const size_t query_elements =
      static_cast<size_t>(sketcher_->full_query_elements());
  if (request.keys.size() != n * key_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "append.keys: ", request.keys.size(), " elements, expected ", n,
        " entries x ", key_elements, " (layers x kv_heads x head_dim)"));
  }
  const bool decides = NextStepDecides(static_cast<int64_t>(n));
  // keydiff reads no query: its decision steps may omit them.
  const bool needs_queries = decides && RankingNeedsQueries(config_.ranking);
  if (request.queries.size() != query_elements &&
      (needs_queries || !request.queries.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queries: ", request.queries.size(), " elements, expected ",
        query_elements, " (layers x q_heads x head_dim)",
        decides && config_.decide_every > 1 ? " on a decision step" : ""));
  }
  if (!decides) {
    // Nothing of the step's entropy is used or sent.
    *has_entropy = false;
    *entropy = 0.0;
    return live_.CheckAppend(request.slot_ids, request.pinned);
  }
  absl::Status append = live_.CheckAppend(request.slot_ids, request.pinned);
  if (!append.ok()) return append;
  *has_entropy = false;
  *entropy = 0.0;
  if (request.entropy.has_value() && !request.logits.empty()) {
    return absl::InvalidArgumentError(
        "entropy: give the entropy or the logits, not both");
  }
  if (request.entropy.has_value()) {
    absl::Status valid = ValidateEntropy(*request.entropy);
    if (!valid.ok()) return valid;
    *entropy = *request.entropy;
    *has_entropy = true;
  } else if (!request.logits.empty()) {
    absl::StatusOr<double> h = EntropyFromLogits(request.logits);
    if (!h.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("logits: ", h.status().message()));
    }
    *entropy = *h;
    *has_entropy = true;
  } else if (PolicyNeedsEntropy(config_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("entropy: policy ", PolicyName(config_),
                     " reads the entropy; give it or the logits"));
  }
  return absl::OkStatus();
}

absl::Status Session::Impl::StepAsync(const StepRequest& request) {
  const SessionCounters before = counters_;
  absl::Status status = StepAsyncImpl(request);
  shared_.totals->AddDelta(before, counters_);
  return status;
}

absl::StatusOr<StepOutcome> Session::Impl::Collect() {
  const SessionCounters before = counters_;
  absl::StatusOr<StepOutcome> outcome = CollectImpl();
  shared_.totals->AddDelta(before, counters_);
  if (outcome.ok()) DeliverMoves(*outcome);
  return outcome;
}

void Session::Impl::DeliverMoves(const StepOutcome& outcome) const {
  if (config_.tier.capacity <= 0) return;
  const SessionOptions::TierCallbacks& tier = options_.tier;
  if (tier.evict && !outcome.evicted.empty()) tier.evict(outcome.evicted);
  if (tier.demote && !outcome.demoted.empty()) tier.demote(outcome.demoted);
  if (tier.promote && !outcome.promoted.empty()) {
    tier.promote(outcome.promoted);
  }
}

absl::Status Session::Impl::StepAsyncImpl(const StepRequest& request) {
  if (closed_) {
    return absl::FailedPreconditionError("entrokv: the session is closed");
  }
  if (batch_gone_) {
    return absl::FailedPreconditionError(
        "entrokv: the session's DecodeBatch was destroyed");
  }
  if (in_flight_.size() >= 2) {
    return absl::FailedPreconditionError(
        "entrokv: two steps in flight already; Collect() first");
  }
  if (batch_ != nullptr) return GatherStep(request);
  if (degraded_) MaybeRecover(request);
  std::unique_ptr<v1::DecodeRequest> message;
  if (!degraded_) message = client_internal::ReusedRequest(stream_.get());
  absl::Status prepared =
      Prepare(request, message == nullptr ? nullptr : message->add_steps());
  if (!prepared.ok()) return prepared;
  if (message != nullptr) {
    counters_.bytes_sent += static_cast<int64_t>(message->ByteSizeLong());
    stream_->Send(std::move(message),
                  in_flight_.back().sent + options_.step_deadline);
  }
  return absl::OkStatus();
}

absl::Status Session::Impl::Prepare(const StepRequest& request,
                                    v1::SessionStep* out) {
  double entropy = 0.0;
  bool has_entropy = false;
  absl::Status valid = Validate(request, &entropy, &has_entropy);
  if (!valid.ok()) {
    ++counters_.rejected_steps;
    return valid;
  }
  const absl::Time now = absl::Now();
  const uint64_t step = next_step_;
  const bool resync = out != nullptr && resync_.has_value();
  if (out != nullptr) {
    out->set_session_id(id_);
    out->set_step(step);
    v1::Append* append = out->mutable_append();
    // After a recovery: the live entries first, in append order.
    bool pinned = !request.pinned.empty();
    if (resync) {
      append->mutable_slot_ids()->Add(resync_->slot_ids.begin(),
                                      resync_->slot_ids.end());
      append->mutable_keys()->append(resync_->keys);
      for (const uint8_t flag : resync_->pinned) pinned |= flag != 0;
    }
    append->mutable_slot_ids()->Add(request.slot_ids.begin(),
                                    request.slot_ids.end());
    if (pinned) {
      append->mutable_pinned()->Reserve(append->slot_ids_size());
      if (resync) {
        for (const uint8_t flag : resync_->pinned)
          append->add_pinned(flag != 0);
      }
      for (size_t i = 0; i < request.slot_ids.size(); ++i) {
        append->add_pinned(!request.pinned.empty() && request.pinned[i] != 0);
      }
    }
    const ElementType type = config_.shape.element_type;
    const bool decides =
        NextStepDecides(static_cast<int64_t>(request.slot_ids.size()));
    if (sketcher_->identity()) {
      AppendConverted(request.keys, type, append->mutable_keys());
      if (decides && !request.queries.empty()) {
        AppendConverted(request.queries, type, out->mutable_queries());
      }
    } else {
      ToFloats(request.keys, &scratch_in_);
      sketcher_->Keys(scratch_in_,
                      static_cast<int64_t>(request.slot_ids.size()),
                      &scratch_out_);
      AppendConverted(VectorView::F32(scratch_out_), type,
                      append->mutable_keys());
      if (decides && !request.queries.empty()) {
        ToFloats(request.queries, &scratch_in_);
        sketcher_->Queries(scratch_in_, &scratch_out_);
        AppendConverted(VectorView::F32(scratch_out_), type,
                        out->mutable_queries());
      }
    }
    if (!decides) {
      // A step that decides nothing carries no queries and no entropy.
    } else if (!request.logits.empty() && !options_.entropy_on_client) {
      out->mutable_logits()->mutable_values()->Add(request.logits.begin(),
                                                   request.logits.end());
    } else if (has_entropy) {
      out->set_entropy(entropy);
    }
  }
  live_.Append(request.slot_ids, request.pinned);
  in_flight_.push_back(
      Pending{step,
              absl::InlinedVector<uint64_t, 1>(request.slot_ids.begin(),
                                               request.slot_ids.end()),
              now, entropy, out == nullptr, resync, std::nullopt, nullptr, -1});
  if (resync) resync_.reset();
  ++next_step_;
  return absl::OkStatus();
}

absl::Status Session::Impl::StepBatched(const StepRequest& request) {
  const SessionCounters before = counters_;
  absl::Status status;
  if (closed_) {
    status = absl::FailedPreconditionError("entrokv: the session is closed");
  } else if (!in_flight_.empty()) {
    status = absl::FailedPreconditionError(
        "entrokv: a step of this session is already in flight");
  } else {
    status = GatherStep(request);
  }
  shared_.totals->AddDelta(before, counters_);
  return status;
}

absl::Status Session::Impl::GatherStep(const StepRequest& request) {
  // One step per session per message: a step still being gathered goes
  // first.
  if (batch_->Holds(this)) batch_->SendGathered();
  if (!degraded_ && batch_generation_ != batch_->generation()) {
    // The batch's stream ended under another session's step: this
    // session's server state may be ahead of the engine's; start over.
    Degrade(absl::UnavailableError("entrokv: the DecodeBatch's stream ended"));
  }
  if (degraded_) MaybeRecover(request);
  std::shared_ptr<client_internal::BatchMessage> message;
  int index = -1;
  v1::SessionStep* out =
      degraded_ ? nullptr : batch_->AddStep(&message, &index);
  absl::Status status = Prepare(request, out);
  if (!status.ok()) {
    if (out != nullptr) batch_->DropLastStep();
    return status;
  }
  if (out != nullptr) {
    counters_.bytes_sent += static_cast<int64_t>(out->ByteSizeLong());
    in_flight_.back().message = std::move(message);
    in_flight_.back().index = index;
  }
  batch_->Gathered(this, out != nullptr, options_.step_deadline);
  return absl::OkStatus();
}

absl::StatusOr<StepOutcome> Session::Impl::CollectGathered(
    const Pending& pending) {
  client_internal::BatchMessage* message = pending.message.get();
  if (degraded_) {
    // Already local. A step whose message failed still counts its own
    // cause (the stream's end may have degraded the session first).
    const std::optional<absl::Status>& failed = message->outcome;
    if (failed.has_value() && !failed->ok()) {
      return FailedAnswer(pending, *failed);
    }
    return Fallback(pending, Cause::kDegraded);
  }
  if (batch_ != nullptr) batch_->Await(message);
  if (!message->outcome.has_value()) {
    message->outcome = absl::UnavailableError(
        "entrokv: the session's DecodeBatch was destroyed");
  }
  if (!message->outcome->ok()) return FailedAnswer(pending, *message->outcome);
  const v1::DecodeResponse& response = message->response;
  const int index = pending.index;
  if (index < 0 || index >= response.results_size() ||
      response.results(index).session_id() != id_) {
    Degrade(absl::InternalError(
        "entrokv: a batch response without this session's result"));
    return Fallback(pending, Cause::kUnavailable);
  }
  counters_.bytes_received +=
      static_cast<int64_t>(response.results(index).ByteSizeLong());
  return Finish(pending, response.results(index));
}

void Session::Impl::Degrade(absl::Status why) {
  if (degraded_) return;
  degraded_ = true;
  degraded_reason_ = std::move(why);
  shared_.log->Degraded(degraded_reason_, options_.live_keys != nullptr);
  // The server's state no longer matches the engine's cache: end the stream;
  // the server keeps the session until its idle timeout, Close(), or a
  // recovery (which closes it).
  if (stream_ != nullptr) stream_->Cancel();
  next_recovery_ = absl::Now() + Jittered(recovery_wait_);
  WatchHealth();
}

StepOutcome Session::Impl::FailedAnswer(const Pending& pending,
                                        const absl::Status& why) {
  // A recovery whose first step fails counts as a failed attempt.
  if (pending.resync) {
    recovery_wait_ =
        std::min(recovery_wait_ * 2, options_.max_recovery_interval);
  }
  Degrade(why);
  return Fallback(pending, why.code() == absl::StatusCode::kDeadlineExceeded
                               ? Cause::kDeadline
                               : Cause::kUnavailable);
}

StepOutcome Session::Impl::Fallback(const Pending& pending, Cause cause) {
  StepOutcome outcome;
  outcome.step = pending.step;
  // With a demote tier, every demoted entry too: no one scores them any
  // more (session.h, "Demote tier"). Without one, the streaming evictions.
  outcome.evicted = live_.FailOpenEvictions(rule_);
  live_.Remove(outcome.evicted);
  outcome.live = live_.size();
  outcome.budget = rule_.budget;
  outcome.entropy = pending.entropy;
  outcome.fallback = true;
  outcome.latency = absl::Now() - pending.sent;
  shared_.totals->ObserveLatency(outcome.latency, /*local=*/true);
  ++counters_.steps;
  ++counters_.fallback_steps;
  switch (cause) {
    case Cause::kDeadline:
      ++counters_.fallback_deadline;
      break;
    case Cause::kUnavailable:
      ++counters_.fallback_unavailable;
      break;
    case Cause::kDegraded:
      ++counters_.fallback_degraded;
      break;
  }
  counters_.evicted_by_fallback += static_cast<int64_t>(outcome.evicted.size());
  return outcome;
}

absl::StatusOr<StepOutcome> Session::Impl::CollectImpl() {
  if (in_flight_.empty()) {
    return absl::FailedPreconditionError("entrokv: no step in flight");
  }
  Pending pending = std::move(in_flight_.front());
  in_flight_.erase(in_flight_.begin());
  if (pending.decided.has_value()) return *std::move(pending.decided);
  if (pending.local) {
    return Fallback(pending, LocalCause());
  }
  if (pending.message != nullptr) return CollectGathered(pending);
  if (degraded_) return Fallback(pending, Cause::kDegraded);

  absl::Status read =
      stream_->Next(pending.sent + options_.step_deadline, &answer_);
  if (!read.ok()) return FailedAnswer(pending, read);
  counters_.bytes_received += static_cast<int64_t>(answer_.ByteSizeLong());
  if (answer_.results_size() != 1) {
    Degrade(absl::InternalError(absl::StrCat(
        "entrokv: a step response with ", answer_.results_size(), " results")));
    return Fallback(pending, Cause::kUnavailable);
  }
  return Finish(pending, answer_.results(0));
}

absl::StatusOr<StepOutcome> Session::Impl::Finish(
    const Pending& pending, const v1::SessionStepResult& result) {
  absl::Status status = client_internal::FromProto(result.status());
  if (!status.ok()) {
    // The server left the session unchanged: forget the step's entries, and
    // let the next step take its number again.
    live_.Remove(pending.slot_ids);
    next_step_ = std::min(next_step_, pending.step);
    ++counters_.rejected_steps;
    if (pending.resync) {
      // The new server session holds none of the live entries: give it up
      // and go on locally; a later attempt re-creates one.
      client_internal::CloseInBackground(shared_.stub, id_,
                                         shared_.rpc_deadline);
      recovery_wait_ =
          std::min(recovery_wait_ * 2, options_.max_recovery_interval);
      Degrade(status);
    }
    return status;
  }
  if (pending.resync) {
    ++counters_.recoveries;
    recovery_wait_ = options_.recovery_interval;
    shared_.log->Recovered();
  }
  StepOutcome outcome;
  outcome.step = pending.step;
  outcome.evicted.assign(result.evicted().begin(), result.evicted().end());
  outcome.demoted.assign(result.demoted().begin(), result.demoted().end());
  outcome.promoted.assign(result.promoted().begin(), result.promoted().end());
  // In the order an engine applies them (session.h, "Demote tier").
  live_.Remove(outcome.evicted);
  live_.Demote(outcome.demoted);
  live_.Promote(outcome.promoted);
  outcome.live = result.live();
  outcome.budget = result.budget();
  outcome.entropy = result.entropy();
  outcome.deferred = result.deferred();
  outcome.latency = absl::Now() - pending.sent;
  outcome.server_compute = absl::Nanoseconds(result.compute_ns());
  shared_.totals->ObserveLatency(outcome.latency, /*local=*/false);
  ++counters_.steps;
  ++counters_.server_steps;
  counters_.evicted_by_server += static_cast<int64_t>(outcome.evicted.size());
  return outcome;
}

absl::Status Session::Impl::Close() {
  if (closed_) return absl::OkStatus();
  const SessionCounters before = counters_;
  closed_ = true;
  in_flight_.clear();
  if (batch_ != nullptr) batch_->Closed(this);
  absl::Status status = absl::OkStatus();
  if (!id_.empty()) {
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + options_.create_deadline));
    v1::CloseSessionRequest request;
    request.set_session_id(id_);
    v1::CloseSessionResponse response;
    status = client_internal::FromGrpc(
        shared_.stub->CloseSession(&context, request, &response));
    if (!status.ok() && options_.offline_when_unavailable) {
      if (status.code() == absl::StatusCode::kNotFound) {
        // Already gone: reclaimed after its idle timeout, or lost with a
        // server restart. Nothing is left to free.
        status = absl::OkStatus();
      } else if (client_internal::IsServerSideFailure(status)) {
        // Completed locally; the server reclaims the session after its idle
        // timeout.
        ++counters_.unconfirmed_closes;
        status = absl::OkStatus();
      }
    }
  }
  stream_.reset();  // Cancels the stream and waits for its end.
  shared_.totals->AddDelta(before, counters_);
  return status;
}

// --- Session ----------------------------------------------------------------

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

const std::string& Session::id() const { return impl_->id(); }
const SessionConfig& Session::config() const { return impl_->config(); }
uint64_t Session::next_step() const { return impl_->next_step(); }
bool Session::degraded() const { return impl_->degraded(); }
absl::Status Session::degraded_reason() const {
  return impl_->degraded_reason();
}
int Session::in_flight() const { return impl_->in_flight(); }
bool Session::NextStepDecides(int64_t appended) const {
  return impl_->NextStepDecides(appended);
}
SessionCounters Session::counters() const { return impl_->counters(); }
std::vector<uint64_t> Session::LiveSlots() const { return impl_->LiveSlots(); }
std::vector<uint64_t> Session::TierSlots() const { return impl_->TierSlots(); }

absl::StatusOr<StepOutcome> Session::Step(const StepRequest& request) {
  if (impl_->in_flight() != 0) {
    return absl::FailedPreconditionError(
        "entrokv: Step() with steps in flight; Flush() first");
  }
  absl::Status sent = impl_->StepAsync(request);
  if (!sent.ok()) return sent;
  return impl_->Collect();
}

absl::StatusOr<std::optional<StepOutcome>> Session::StepPipelined(
    const StepRequest& request) {
  if (impl_->in_flight() > 1) {
    return absl::FailedPreconditionError(
        "entrokv: StepPipelined() with two steps in flight");
  }
  absl::Status sent = impl_->StepAsync(request);
  if (!sent.ok()) return sent;
  if (impl_->in_flight() < 2) return std::optional<StepOutcome>();
  absl::StatusOr<StepOutcome> previous = impl_->Collect();
  if (!previous.ok()) return previous.status();
  return std::optional<StepOutcome>(*std::move(previous));
}

absl::Status Session::StepAsync(const StepRequest& request) {
  return impl_->StepAsync(request);
}

absl::StatusOr<StepOutcome> Session::Collect() { return impl_->Collect(); }

absl::StatusOr<std::optional<StepOutcome>> Session::Flush() {
  if (impl_->in_flight() > 1) {
    return absl::FailedPreconditionError(
        "entrokv: Flush() with two steps in flight; Collect() first");
  }
  if (impl_->in_flight() == 0) return std::optional<StepOutcome>();
  absl::StatusOr<StepOutcome> outcome = impl_->Collect();
  if (!outcome.ok()) return outcome.status();
  return std::optional<StepOutcome>(*std::move(outcome));
}

absl::Status Session::Close() { return impl_->Close(); }

}  // namespace entrokv
