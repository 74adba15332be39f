// Session::Impl's recovery (session.h, "Recovery"): before a step of a
// degraded session, the health watch and the channel say whether an attempt
// may be made; one creates and attaches a new server session and reads the
// live entries' keys from the engine's live_keys, which the next step
// re-sends (Prepare, in session.cc). Degrade() starts the wait.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "entrokv/client/session.h"
#include "entrokv/client/vectors.h"
#include "grpcpp/grpcpp.h"
#include "session_impl.h"

namespace entrokv {
namespace {

// `status` with `what` before its message, its code kept.
absl::Status Prefixed(absl::string_view what, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(what, status.message()));
}

}  // namespace

void Session::Impl::WatchHealth() {
  degraded_at_ = absl::Now();
  if (!options_.live_keys) return;  // It will not recover.
  client_internal::HealthWatch::Check(shared_.health, shared_.channel,
                                      options_.create_deadline,
                                      /*now_due=*/true);
}

absl::Duration Session::Impl::Jittered(absl::Duration wait) {
  const double jitter = std::clamp(options_.recovery_jitter, 0.0, 1.0);
  if (jitter == 0.0 || wait == absl::InfiniteDuration()) return wait;
  std::uniform_real_distribution<double> u(-jitter, jitter);
  return wait * (1.0 + u(random_));
}

void Session::Impl::RecoveryFailed() {
  recovery_wait_ = std::min(recovery_wait_ * 2, options_.max_recovery_interval);
  next_recovery_ = absl::Now() + Jittered(recovery_wait_);
  // The next attempt waits for a check that finds the server serving again.
  WatchHealth();
}

bool Session::Impl::RecoveryAccepts(const StepRequest& request) const {
  double entropy = 0.0;
  bool has_entropy = false;
  // A step the session rejects anyway is rejected without an attempt.
  if (!Validate(request, &entropy, &has_entropy).ok()) return false;
  // The new server session counts its steps from zero: its first step
  // decides when decide_every is 1 or the hard ceiling is passed, and must
  // then carry what a decision needs, whatever the old cadence said.
  const int64_t appended = static_cast<int64_t>(request.slot_ids.size());
  const bool decides = config_.decide_every <= 1 ||
                       (config_.hard_ceiling > 0 &&
                        live_.size() + appended > config_.hard_ceiling);
  if (!decides) return true;
  // keydiff reads no query: its decisions may come without them.
  if (RankingNeedsQueries(config_.ranking) &&
      request.queries.size() !=
          static_cast<size_t>(sketcher_->full_query_elements())) {
    return false;
  }
  return !PolicyNeedsEntropy(config_) || request.entropy.has_value() ||
         !request.logits.empty();
}

void Session::Impl::MaybeRecover(const StepRequest& request) {
  if (!options_.live_keys) return;
  // The health watch: each step of a degraded session may send a health
  // check in the background (one at a time per Client, at most every 100
  // ms); it never waits for one. An attempt is made only once a check sent
  // since the session degraded found the server serving, so that a server
  // that is down, stopped or draining costs the engine no blocked step and
  // no growing backoff.
  client_internal::HealthWatch::Check(shared_.health, shared_.channel,
                                      options_.create_deadline);
  if (absl::Now() < next_recovery_) return;
  if (!shared_.health->ServingSince(degraded_at_)) return;
  if (shared_.channel->GetState(/*try_to_connect=*/true) !=
      GRPC_CHANNEL_READY) {
    return;
  }
  if (!RecoveryAccepts(request)) return;
  ++counters_.recovery_attempts;
  if (!Recover(absl::Now() + options_.create_deadline).ok()) RecoveryFailed();
}

absl::Status Session::Impl::ResyncKeys(Resync* resync) {
  if (resync->slot_ids.empty()) return absl::OkStatus();
  std::vector<float> keys;
  absl::Status status = options_.live_keys(resync->slot_ids, &keys);
  if (!status.ok()) return Prefixed("live_keys: ", status);
  const int64_t n = static_cast<int64_t>(resync->slot_ids.size());
  const size_t expected =
      static_cast<size_t>(n * sketcher_->full_key_elements());
  if (keys.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "live_keys: ", keys.size(), " floats for ", n, " entries, expected ",
        expected, " (entries x layers x kv_heads x head_dim)"));
  }
  const ElementType type = config_.shape.element_type;
  if (sketcher_->identity()) {
    AppendConverted(VectorView::F32(keys), type, &resync->keys);
  } else {
    sketcher_->Keys(keys, n, &scratch_out_);
    AppendConverted(VectorView::F32(scratch_out_), type, &resync->keys);
  }
  return absl::OkStatus();
}

absl::Status Session::Impl::Recover(absl::Time deadline) {
  // The steps in flight are settled locally now, so that the live entries
  // re-sent are those the engine holds once it has applied them.
  for (Pending& pending : in_flight_) {
    if (!pending.decided.has_value()) {
      pending.decided = Fallback(pending, LocalCause());
    }
  }
  // The server first: most failed attempts are its, and they should not
  // cost the engine a copy of its keys.
  absl::StatusOr<client_internal::CreatedSession> created =
      client_internal::CreateServerSession(shared_, requested_,
                                           options_.shadowing, "", deadline);
  if (!created.ok()) return created.status();
  // A session of a DecodeBatch attaches to the batch's stream (a new one
  // when the last one ended), any other to a stream of its own.
  std::unique_ptr<client_internal::DecodeStream> stream;
  client_internal::DecodeStream* via = nullptr;
  // A batch first reads the answers to its messages in flight (each within
  // its own step deadline); the attach's time starts after them.
  const absl::Time drain_start = absl::Now();
  if (batch_ != nullptr) {
    via = batch_->LiveStream();
  } else {
    stream = client_internal::OpenStream(shared_, options_.stream_api);
    via = stream.get();
  }
  absl::Status status = client_internal::AttachOn(
      via, created->id, deadline + (absl::Now() - drain_start));
  if (!status.ok() && batch_ != nullptr) batch_->EndStream();
  Resync resync;
  if (status.ok()) {
    live_.Entries(&resync.slot_ids, &resync.pinned);
    status = ResyncKeys(&resync);
  }
  if (!status.ok()) {
    client_internal::CloseInBackground(shared_.stub, created->id,
                                       shared_.rpc_deadline);
    return status;
  }
  // Online again, under the new id. The old server session's state no
  // longer matches the engine's cache: close it.
  if (!id_.empty()) {
    client_internal::CloseInBackground(shared_.stub, id_, shared_.rpc_deadline);
  }
  id_ = created->id;
  config_ = created->config;
  stream_ = std::move(stream);  // Null for a session of a DecodeBatch.
  if (batch_ != nullptr) batch_generation_ = batch_->generation();
  // The new server session numbers its steps on from the engine's next one
  // and counts them from zero (the decision cadence restarts).
  first_step_ = next_step_;
  steps_done_ = 0;
  degraded_ = false;
  degraded_reason_ = absl::OkStatus();
  offline_ = false;
  next_recovery_ = absl::InfiniteFuture();
  resync_ = std::move(resync);
  return absl::OkStatus();
}

}  // namespace entrokv
