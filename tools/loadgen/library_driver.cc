// The client-library drivers (--client=library, the default, and
// library-callback): one session per thread through entrokv::Session, as
// engines run it, or --batch sessions per thread through one DecodeBatch.
// The library's local fallbacks are counted apart from the server's answers
// (report.h). Echo goes over the raw transport in either case.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "entrokv/client/batch.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "report.h"
#include "runner.h"
#include "session_runner.h"
#include "sync_stream.h"
#include "workload.h"

namespace entrokv::loadgen {

void Shared::CollectShadows(const Session& session) {
  if (options.session_options.shadowing.empty() || session.id().empty()) {
    return;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (true) {
    absl::StatusOr<SessionInfo> info = client->GetSession(session.id());
    if (!info.ok() || !info->shadows.has_value()) return;
    if (info->shadows->steps_observed == info->stats.steps ||
        absl::Now() > deadline) {
      absl::MutexLock lock(&mu);
      shadows.push_back(*std::move(info->shadows));
      return;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

namespace {

// The byte counts of `session`'s counters from `before` to now.
void AddBytes(const SessionCounters& before, const Session& session,
              int64_t* sent, int64_t* received) {
  const SessionCounters after = session.counters();
  *sent += after.bytes_sent - before.bytes_sent;
  *received += after.bytes_received - before.bytes_received;
}

class LibrarySessionRunner final : public SessionRunner {
 public:
  using SessionRunner::SessionRunner;

  void TearDown() override {
    if (session_ == nullptr) return;
    shared()->CollectShadows(*session_);
    if (absl::Status closed = session_->Close(); !closed.ok()) {
      shared()->CloseFailed(closed);
    }
  }

 private:
  absl::StatusOr<std::string> Open() override {
    absl::StatusOr<std::unique_ptr<Session>> session =
        shared()->client->CreateSession(shared()->options.config,
                                        shared()->options.session_options);
    if (!session.ok()) return session.status();
    session_ = *std::move(session);
    return session_->id();
  }

  StepAnswer SendDecode(uint64_t first_slot, int count, const std::string& keys,
                        const std::string& query, double entropy,
                        ModeStats* stats) override {
    std::vector<uint64_t> slots(count);
    for (int i = 0; i < count; ++i) slots[i] = first_slot + i;
    const SessionCounters before = session_->counters();
    absl::StatusOr<StepOutcome> outcome = session_->Step(
        MakeStepRequest(element_type(), slots, keys, query, entropy));
    StepAnswer answer;
    if (!outcome.ok()) {
      answer.status = outcome.status();
      return answer;
    }
    answer.fallback = outcome->fallback;
    if (answer.fallback) answer.degraded_reason = session_->degraded_reason();
    if (stats != nullptr) {
      AddBytes(before, *session_, &stats->bytes_sent, &stats->bytes_received);
      if (!outcome->fallback) {
        stats->evicted += static_cast<int64_t>(outcome->evicted.size());
        stats->server_ns.push_back(
            absl::ToInt64Nanoseconds(outcome->server_compute));
      }
    }
    return answer;
  }

  std::unique_ptr<Session> session_;
};

// One thread stepping `data.size()` sessions through one DecodeBatch: one
// message per decode step for all of them. Echo sends one message of the
// same bytes each way.
class BatchRunner final : public Runner {
 public:
  BatchRunner(Shared* shared, std::vector<SessionData> data)
      : shared_(shared), data_(std::move(data)) {}

  absl::Status SetUp() override {
    const Options& options = shared_->options;
    batch_ = shared_->client->CreateBatch(options.session_options.stream_api);
    for (size_t i = 0; i < data_.size(); ++i) {
      absl::StatusOr<std::unique_ptr<Session>> session =
          batch_->CreateSession(options.config, options.session_options);
      if (!session.ok()) return session.status();
      sessions_.push_back(*std::move(session));
    }
    next_slot_.assign(data_.size(), 0);
    // Prefill one session per message: a whole batch's prefill chunk could
    // pass the server's message size limit.
    for (size_t i = 0; i < data_.size(); ++i) {
      for (size_t c = 0; c < data_[i].prefill_keys.size(); ++c) {
        const std::vector<uint64_t> slots =
            Slots(i, data_[i].prefill_counts[c]);
        const BatchStep step{
            sessions_[i].get(),
            Request(slots, data_[i].prefill_keys[c], data_[i].prefill_query,
                    data_[i].prefill_entropy)};
        absl::StatusOr<StepOutcome> o = std::move(batch_->Step({&step, 1})[0]);
        if (!o.ok()) return o.status();
        if (o->fallback) {
          return PrefillFellBack(sessions_[i]->degraded_reason());
        }
      }
    }
    if (shared_->RunsEcho()) {
      echo_ = std::make_unique<EchoSender>(shared_->stub.get(),
                                           options.sync_timeout);
    }
    return absl::OkStatus();
  }

  void RunPhase(const std::string& mode, absl::Time phase_start) override {
    ModeStats stats;
    const int64_t n = static_cast<int64_t>(data_.size());
    if (mode != "echo") {
      counted_.clear();
      for (const auto& session : sessions_) {
        counted_.push_back(session->counters());
      }
    }
    for (int k = 0; k < shared_->options.steps_per_round; ++k) {
      // Open loop: a message's latency runs from its scheduled time, so
      // that queueing counts.
      const absl::Time start =
          PaceStep(shared_->options.MessageRate(), phase_start, k);
      if (mode != "echo") {
        Decode(start, &stats);
      } else if (echo_->ended()) {
        // Not sent: counted under the status that ended the stream.
        stats.not_sent[CodeName(echo_->status().code())] += n;
      } else {
        Echo(start, &stats);
      }
      shared_->done.fetch_add(n, std::memory_order_relaxed);
    }
    // The phase's last message is answered within the phase.
    if (in_flight_.has_value()) CollectInFlight(&stats);
    if (mode != "echo" && shared_->options.steps_per_round > 0) {
      // Echo's messages: the mean size of this phase's messages each way.
      last_sent_ = stats.bytes_sent / shared_->options.steps_per_round;
      last_received_ = stats.bytes_received / shared_->options.steps_per_round;
    }
    shared_->Merge(mode, stats);
  }

  void TearDown() override {
    for (auto& session : sessions_) {
      shared_->CollectShadows(*session);
      if (absl::Status closed = session->Close(); !closed.ok()) {
        shared_->CloseFailed(closed);
      }
    }
    // A broken echo stream was counted when it broke.
    if (echo_ != nullptr) (void)echo_->Close();
  }

 private:
  std::vector<uint64_t> Slots(size_t i, int count) {
    std::vector<uint64_t> slots(count);
    for (int e = 0; e < count; ++e) slots[e] = kSlotBase + next_slot_[i]++;
    return slots;
  }

  StepRequest Request(absl::Span<const uint64_t> slots, const std::string& keys,
                      const std::string& query, double entropy) const {
    return MakeStepRequest(shared_->options.config.shape.element_type, slots,
                           keys, query, entropy);
  }

  // One message of steps; its latency runs from `start`.
  void Decode(absl::Time start, ModeStats* stats) {
    // Each session's new slot, and the steps, in members: an engine keeps
    // its own per-step bookkeeping out of the CPU it shares with the
    // server, and so does this one.
    step_slots_.resize(data_.size());
    std::vector<BatchStep>& steps = steps_;
    steps.clear();
    for (size_t i = 0; i < data_.size(); ++i) {
      const PoolStep& pick = data_[i].pool[pool_index_ % data_[i].pool.size()];
      step_slots_[i] = kSlotBase + next_slot_[i]++;
      steps.push_back(
          {sessions_[i].get(), Request(absl::MakeConstSpan(&step_slots_[i], 1),
                                       pick.key, pick.query, pick.entropy)});
    }
    ++pool_index_;
    const std::string& calls = shared_->options.batch_calls;
    if (calls == "batch") {
      const std::vector<absl::StatusOr<StepOutcome>> outcomes =
          batch_->Step(steps);
      Tally(outcomes, absl::Now() - start, stats);
      return;
    }
    // Each session's own halves: the library gathers the steps into one
    // message, sent with the last StepAsync.
    InFlight sent{start, {}};
    sent.sent.reserve(steps.size());
    for (const BatchStep& step : steps) {
      sent.sent.push_back(step.session->StepAsync(step.request));
    }
    if (calls == "pipelined") {
      // This message goes out before the previous one's answers are read,
      // as an engine that overlaps the sidecar with its own compute does.
      if (in_flight_.has_value()) CollectInFlight(stats);
      in_flight_ = std::move(sent);
      return;
    }
    in_flight_ = std::move(sent);
    CollectInFlight(stats);
  }

  // Reads the answers to the message in flight (each session's Collect) and
  // counts them; its latency runs from its first StepAsync to now.
  void CollectInFlight(ModeStats* stats) {
    std::vector<absl::StatusOr<StepOutcome>> outcomes;
    outcomes.reserve(in_flight_->sent.size());
    for (size_t i = 0; i < in_flight_->sent.size(); ++i) {
      outcomes.push_back(in_flight_->sent[i].ok() ? sessions_[i]->Collect()
                                                  : absl::StatusOr<StepOutcome>(
                                                        in_flight_->sent[i]));
    }
    const absl::Duration latency = absl::Now() - in_flight_->start;
    in_flight_.reset();
    Tally(outcomes, latency, stats);
  }

  // Counts one message's outcomes (session i's at index i), and the bytes
  // every session sent and received since they were last counted.
  void Tally(const std::vector<absl::StatusOr<StepOutcome>>& outcomes,
             absl::Duration latency, ModeStats* stats) {
    bool all_server = true;
    int64_t sent = 0, received = 0;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const SessionCounters now = sessions_[i]->counters();
      sent += now.bytes_sent - counted_[i].bytes_sent;
      received += now.bytes_received - counted_[i].bytes_received;
      counted_[i] = now;
      if (!outcomes[i].ok()) {
        ++stats->codes[CodeName(outcomes[i].status().code())];
        all_server = false;
      } else if (outcomes[i]->fallback) {
        ++stats->fallbacks;
        ++stats
              ->fallback_causes[FallbackCause(sessions_[i]->degraded_reason())];
        all_server = false;
      } else {
        ++stats->codes["OK"];
        stats->evicted += static_cast<int64_t>(outcomes[i]->evicted.size());
        stats->server_ns.push_back(
            absl::ToInt64Nanoseconds(outcomes[i]->server_compute));
      }
    }
    stats->bytes_sent += sent;
    stats->bytes_received += received;
    // A message's latency counts only when the server answered all of it.
    if (all_server) {
      stats->latency_ns.push_back(absl::ToInt64Nanoseconds(latency));
    }
  }

  void Echo(absl::Time start, ModeStats* stats) {
    if (last_sent_ == 0) {
      // No decode message yet this run: size one like it.
      last_sent_ = static_cast<int64_t>(data_.size()) * 64;
      last_received_ = static_cast<int64_t>(data_.size()) * 48;
    }
    if (!echo_->RoundTrip(last_sent_, last_received_, stats)) {
      // The message carried one step of each session.
      stats->codes[CodeName(echo_->status().code())] +=
          static_cast<int64_t>(data_.size());
      return;
    }
    stats->latency_ns.push_back(absl::ToInt64Nanoseconds(absl::Now() - start));
    stats->codes["OK"] += static_cast<int64_t>(data_.size());
  }

  Shared* const shared_;
  const std::vector<SessionData> data_;
  std::unique_ptr<DecodeBatch> batch_;
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<uint64_t> next_slot_;
  // Decode()'s: this step's slot of each session, and the steps.
  std::vector<uint64_t> step_slots_;
  std::vector<BatchStep> steps_;
  // Each session's counters when its bytes were last counted.
  std::vector<SessionCounters> counted_;
  // A message sent by StepAsync and not yet collected (--batch_calls=session
  // or pipelined): when its first step was sent, and each step's send.
  struct InFlight {
    absl::Time start;
    std::vector<absl::Status> sent;
  };
  std::optional<InFlight> in_flight_;
  size_t pool_index_ = 0;
  int64_t last_sent_ = 0;
  int64_t last_received_ = 0;
  std::unique_ptr<EchoSender> echo_;
};

}  // namespace

std::unique_ptr<Runner> CreateLibraryRunner(Shared* shared, SessionData data) {
  return std::make_unique<LibrarySessionRunner>(shared, std::move(data));
}

std::unique_ptr<Runner> CreateBatchRunner(Shared* shared,
                                          std::vector<SessionData> data) {
  return std::make_unique<BatchRunner>(shared, std::move(data));
}

}  // namespace entrokv::loadgen
