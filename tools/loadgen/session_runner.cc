#include "session_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace entrokv::loadgen {

std::string FallbackCause(const absl::Status& degraded_reason) {
  const absl::StatusCode code = degraded_reason.code();
  return code == absl::StatusCode::kOk ? "UNKNOWN" : CodeName(code);
}

absl::Status PrefillFellBack(const absl::Status& degraded_reason) {
  return absl::Status(
      degraded_reason.ok() ? absl::StatusCode::kUnavailable
                           : degraded_reason.code(),
      absl::StrCat("prefill decided locally: ", degraded_reason.message()));
}

SessionRunner::SessionRunner(Shared* shared, SessionData data)
    : shared_(shared), data_(std::move(data)) {}

absl::Status SessionRunner::SetUp() {
  absl::StatusOr<std::string> id = Open();
  if (!id.ok()) return id.status();
  session_id_ = *std::move(id);
  for (size_t c = 0; c < data_.prefill_keys.size(); ++c) {
    const int count = data_.prefill_counts[c];
    const StepAnswer answer =
        SendDecode(kSlotBase + next_slot_, count, data_.prefill_keys[c],
                   data_.prefill_query, data_.prefill_entropy, nullptr);
    next_slot_ += count;
    if (!answer.status.ok()) return answer.status;
    if (answer.fallback) return PrefillFellBack(answer.degraded_reason);
  }
  if (shared_->RunsEcho()) {
    echo_ = std::make_unique<EchoSender>(shared_->stub.get(),
                                         shared_->options.sync_timeout);
  }
  return absl::OkStatus();
}

void SessionRunner::RunPhase(const std::string& mode, absl::Time phase_start) {
  ModeStats stats;
  const bool is_echo = mode == "echo";
  for (int k = 0; k < shared_->options.steps_per_round; ++k) {
    const absl::Time start =
        PaceStep(shared_->options.MessageRate(), phase_start, k);
    shared_->done.fetch_add(1, std::memory_order_relaxed);
    // A stream that ended stays ended: its steps are not sent, and are
    // counted under the status that ended it.
    const absl::Status* ended =
        is_echo ? (echo_->ended() ? &echo_->status() : nullptr) : DecodeEnded();
    if (ended != nullptr) {
      ++stats.not_sent[CodeName(ended->code())];
      continue;
    }
    // Every step sent, Echo's included, advances the pool.
    const PoolStep& p = data_.pool[pool_index_++ % data_.pool.size()];
    StepAnswer answer;
    if (is_echo) {
      answer.status = SendEcho(&stats);
    } else {
      answer = SendDecode(kSlotBase + next_slot_++, 1, p.key, p.query,
                          p.entropy, &stats);
    }
    if (answer.fallback) {
      // Not a server answer: kept out of the count, the status histogram,
      // the evictions per step and the latency figures.
      ++stats.fallbacks;
      ++stats.fallback_causes[FallbackCause(answer.degraded_reason)];
    } else if (!answer.status.ok()) {
      ++stats.codes[CodeName(answer.status.code())];
    } else {
      ++stats.codes["OK"];
      stats.latency_ns.push_back(absl::ToInt64Nanoseconds(absl::Now() - start));
    }
  }
  shared_->Merge(mode, stats);
}

absl::Status SessionRunner::SendEcho(ModeStats* stats) {
  if (!echo_->RoundTrip(RequestSizeHint(), shared_->echo_reply_bytes, stats)) {
    return Prefixed("Echo: ", echo_->status());
  }
  return absl::OkStatus();
}

// The serialized size of a decode step of this session, measured once.
int64_t SessionRunner::RequestSizeHint() {
  if (request_size_ == 0) {
    v1::DecodeRequest r;
    const PoolStep& p = data_.pool[0];
    FillStep(session_id_, next_step() + 1000, kSlotBase + next_slot_, 1, p.key,
             p.query, p.entropy, r.add_steps());
    request_size_ = static_cast<int64_t>(r.ByteSizeLong());
  }
  return request_size_;
}

}  // namespace entrokv::loadgen
