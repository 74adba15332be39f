// Recovery of a degraded session through the engine's live-keys callback,
// against a scripted server that records what it receives: what a recovery
// sends (a new server session, then one step that re-sends the live entries
// in append order with their pinned flags and keys before the step's own),
// that the old server session is closed, that an attempt never blocks a step
// longer than the creation deadline and backs off, and that a failing
// callback keeps the session local.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client_test_util.h"
#include "entrokv/client/batch.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "recovery_test_util.h"
#include "testing/engine_cache.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::MakeStory;
using ::entrokv::testing::SmallConfig;
using ::entrokv::testing::StoryStep;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using recovery_testing::Engine;
using recovery_testing::ReceivedStep;
using recovery_testing::RecoveryTest;

TEST_P(RecoveryTest, ResendsTheLiveEntriesInAppendOrderWithTheStep) {
  // f32 on the wire: the re-sent key bytes are the engine's floats exactly.
  const SessionConfig config = SmallConfig("window", 6, ElementType::kF32);
  const std::vector<StoryStep> story = MakeStory(config.shape, 4, 4);
  Engine engine(story);
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(config, Options(&engine)));
  EXPECT_EQ(session->id(), "s1");

  // The server goes silent: the prefill (1000..1003, 1001 pinned) misses its
  // deadline and is decided locally; the session degrades.
  service_.swallow_steps = true;
  const std::vector<uint8_t> pinned = {0, 1, 0, 0};
  ASSERT_OK_AND_ASSIGN(StepOutcome prefill,
                       session->Step(engine.Request(0, pinned)));
  EXPECT_TRUE(prefill.fallback);
  EXPECT_TRUE(session->degraded());
  EXPECT_STATUS_CODE(session->degraded_reason(),
                     absl::StatusCode::kDeadlineExceeded);

  // It answers again; before recovery_interval has passed the step stays
  // local and nothing is attempted.
  service_.swallow_steps = false;
  ASSERT_OK_AND_ASSIGN(StepOutcome early, session->Step(engine.Request(1)));
  EXPECT_TRUE(early.fallback);
  EXPECT_EQ(service_.creates(), 1);
  EXPECT_EQ(engine.calls(), 0);

  absl::SleepFor(absl::Milliseconds(120));
  ASSERT_OK_AND_ASSIGN(StepOutcome back, session->Step(engine.Request(2)));
  EXPECT_FALSE(back.fallback);
  EXPECT_EQ(back.step, 2u);  // The step numbering goes on.
  EXPECT_FALSE(session->degraded());
  EXPECT_OK(session->degraded_reason());
  EXPECT_EQ(session->id(), "s2");  // A new server session.
  EXPECT_EQ(service_.creates(), 2);
  EXPECT_EQ(engine.calls(), 1);
  const SessionCounters counters = session->counters();
  EXPECT_EQ(counters.recovery_attempts, 1);
  EXPECT_EQ(counters.recoveries, 1);
  EXPECT_EQ(client_->counters().recoveries, 1);
  // Both changes were written to the client's log, once each.
  EXPECT_THAT(Log(), ElementsAre(AllOf(HasSubstr("lost the sidecar"),
                                       HasSubstr("DEADLINE_EXCEEDED"),
                                       HasSubstr("until it recovers")),
                                 HasSubstr("decided by the sidecar again")));
  // The old server session, whose state no longer matched, is closed.
  EXPECT_TRUE(service_.WaitClosed("s1"));

  // What the new session got: one step, numbered as the engine's, with the
  // five live entries in append order, then the step's own 1005.
  std::vector<ReceivedStep> steps = service_.steps();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].session_id, "s2");
  EXPECT_EQ(steps[0].step, 2u);
  EXPECT_THAT(steps[0].slot_ids,
              ElementsAre(1000, 1001, 1002, 1003, 1004, 1005));
  EXPECT_THAT(steps[0].pinned,
              ElementsAre(false, true, false, false, false, false));
  std::string expected_keys;
  for (uint64_t slot : steps[0].slot_ids) {
    const std::vector<float>& key = engine.KeyOf(slot);
    expected_keys.append(reinterpret_cast<const char*>(key.data()),
                         key.size() * sizeof(float));
  }
  EXPECT_EQ(steps[0].keys, expected_keys);

  // Later steps carry only their own entries.
  ASSERT_OK_AND_ASSIGN(StepOutcome next, session->Step(engine.Request(3)));
  EXPECT_FALSE(next.fallback);
  steps = service_.steps();
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1].step, 3u);
  EXPECT_THAT(steps[1].slot_ids, ElementsAre(1006));
  EXPECT_THAT(steps[1].pinned, IsEmpty());

  EXPECT_OK(session->Close());
  EXPECT_TRUE(service_.WaitClosed("s2"));
}

TEST_P(RecoveryTest, ASketchedSessionResendsItsKeysProjectedAsBefore) {
  // The engine gives full head_dim keys; the library projects them (here to
  // 3 of 8 dimensions) and converts them to f16, for a step as for a
  // recovery: the bytes re-sent for an entry are those first sent for it.
  SessionConfig config = SmallConfig("window", 8, ElementType::kF16);
  config.shape.sketch_dim = 3;
  const std::vector<StoryStep> story = MakeStory(config.shape, 3, 3);
  Engine engine(story);
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(config, Options(&engine)));
  ASSERT_OK_AND_ASSIGN(StepOutcome prefill, session->Step(engine.Request(0)));
  EXPECT_FALSE(prefill.fallback);
  service_.swallow_steps = true;
  ASSERT_OK_AND_ASSIGN(StepOutcome lost, session->Step(engine.Request(1)));
  EXPECT_TRUE(lost.fallback);
  service_.swallow_steps = false;
  absl::SleepFor(absl::Milliseconds(120));
  ASSERT_OK_AND_ASSIGN(StepOutcome back, session->Step(engine.Request(2)));
  EXPECT_FALSE(back.fallback);

  const std::vector<ReceivedStep> steps = service_.steps();
  const std::vector<ReceivedStep> swallowed = service_.swallowed();
  ASSERT_EQ(steps.size(), 2u);
  ASSERT_EQ(swallowed.size(), 1u);
  const ReceivedStep& first = steps[0];       // 1000..1002, on s1.
  const ReceivedStep& resync = steps[1];      // 1000..1004, on s2.
  const ReceivedStep& missed = swallowed[0];  // 1003, on s1.
  EXPECT_EQ(resync.session_id, "s2");
  ASSERT_THAT(resync.slot_ids, ElementsAre(1000, 1001, 1002, 1003, 1004));
  const size_t per_entry = 2 * 2 * 3 * sizeof(uint16_t);  // l x kv x r, f16.
  ASSERT_EQ(first.keys.size(), 3 * per_entry);
  ASSERT_EQ(resync.keys.size(), 5 * per_entry);
  EXPECT_EQ(resync.keys.substr(0, 3 * per_entry), first.keys);
  EXPECT_EQ(resync.keys.substr(3 * per_entry, per_entry), missed.keys);
}

TEST_P(RecoveryTest, PipelinedStepsRecoverTooAndSettleTheStepInFlight) {
  const SessionConfig config = SmallConfig("window", 3, ElementType::kF32);
  const std::vector<StoryStep> story = MakeStory(config.shape, 0, 8);
  Engine engine(story);
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(config, Options(&engine)));
  service_.swallow_steps = true;
  std::vector<StepOutcome> outcomes;
  auto step = [&](size_t t) {
    absl::StatusOr<std::optional<StepOutcome>> previous =
        session->StepPipelined(engine.Request(t));
    ASSERT_TRUE(previous.ok()) << previous.status();
    if (previous->has_value()) {
      engine.Free(**previous);
      outcomes.push_back(**previous);
    }
  };
  step(0);
  step(1);  // Collects step 0: its deadline passes; degraded.
  ASSERT_TRUE(session->degraded());
  service_.swallow_steps = false;
  absl::SleepFor(absl::Milliseconds(120));
  // Step 2 recovers: step 1, in flight and local, is decided before the
  // live entries are re-sent.
  step(2);
  EXPECT_FALSE(session->degraded());
  for (size_t t = 3; t < story.size(); ++t) step(t);
  ASSERT_OK_AND_ASSIGN(std::optional<StepOutcome> last, session->Flush());
  ASSERT_TRUE(last.has_value());
  outcomes.push_back(*last);

  ASSERT_EQ(outcomes.size(), story.size());
  for (size_t t = 0; t < outcomes.size(); ++t) {
    EXPECT_EQ(outcomes[t].step, t);
    EXPECT_EQ(outcomes[t].fallback, t < 2) << "step " << t;
  }
  EXPECT_EQ(session->counters().recoveries, 1);
  // The re-sent entries are those left after step 1's local decision: 1000
  // and 1001 live (budget 3 not reached), then the step's 1002.
  const std::vector<ReceivedStep> steps = service_.steps();
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps[0].session_id, "s2");
  EXPECT_EQ(steps[0].step, 2u);
  EXPECT_THAT(steps[0].slot_ids, ElementsAre(1000, 1001, 1002));
}

TEST_P(RecoveryTest, AnAttemptBlocksAStepAtMostTheCreationDeadlineAndBacksOff) {
  const SessionConfig config = SmallConfig("window", 4, ElementType::kF32);
  const std::vector<StoryStep> story = MakeStory(config.shape, 0, 200);
  Engine engine(story);
  SessionOptions options = Options(&engine);
  ASSERT_OK_AND_ASSIGN(auto session, client_->CreateSession(config, options));
  service_.swallow_steps = true;
  service_.hang_create = true;  // A server that hangs, e.g. SIGSTOPped.
  size_t t = 0;
  ASSERT_OK_AND_ASSIGN(StepOutcome first, session->Step(engine.Request(t++)));
  ASSERT_TRUE(first.fallback);

  // 1.6 s of steps every 20 ms. Each attempt blocks its step for the
  // creation deadline (200 ms), not longer; the waits between attempts are
  // 0.1, 0.2, 0.4, 0.8 s: attempts start at about 0.1, 0.5 and 1.1 s.
  const absl::Time start = absl::Now();
  absl::Duration longest;
  int blocked = 0;
  while (absl::Now() - start < absl::Milliseconds(1600)) {
    const absl::Time before = absl::Now();
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome,
                         session->Step(engine.Request(t++)));
    const absl::Duration took = absl::Now() - before;
    EXPECT_TRUE(outcome.fallback);
    EXPECT_LE(outcome.live, config.budget);
    engine.Free(outcome);
    longest = std::max(longest, took);
    if (took >= absl::Milliseconds(150)) ++blocked;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_LT(longest, options.create_deadline + absl::Milliseconds(300));
  const SessionCounters counters = session->counters();
  EXPECT_GE(counters.recovery_attempts, 2);
  EXPECT_LE(counters.recovery_attempts, 4);
  EXPECT_EQ(blocked, counters.recovery_attempts);
  EXPECT_EQ(counters.recoveries, 0);
  EXPECT_TRUE(session->degraded());
  EXPECT_STATUS_CODE(session->degraded_reason(),
                     absl::StatusCode::kDeadlineExceeded);
  session.reset();
}

TEST_P(RecoveryTest, AFailingCallbackKeepsTheSessionLocal) {
  const SessionConfig config = SmallConfig("window", 4, ElementType::kF32);
  const std::vector<StoryStep> story = MakeStory(config.shape, 0, 40);
  Engine engine(story);
  SessionOptions options = Options(nullptr);
  int calls = 0;
  options.live_keys = [&calls](absl::Span<const uint64_t>,
                               std::vector<float>*) {
    ++calls;
    return absl::UnavailableError("the engine's cache is being swapped");
  };
  ASSERT_OK_AND_ASSIGN(auto session, client_->CreateSession(config, options));
  service_.swallow_steps = true;
  size_t t = 0;
  ASSERT_OK(session->Step(engine.Request(t++)));
  ASSERT_TRUE(session->degraded());
  service_.swallow_steps = false;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Milliseconds(400)) {
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome,
                         session->Step(engine.Request(t++)));
    EXPECT_TRUE(outcome.fallback);
    EXPECT_LE(outcome.live, config.budget);
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_GE(calls, 1);
  EXPECT_EQ(session->counters().recovery_attempts, calls);
  EXPECT_EQ(session->counters().recoveries, 0);
  EXPECT_EQ(session->id(), "s1");
  // Each attempt's server session was given up: none is left behind.
  EXPECT_EQ(service_.creates(), 1 + calls);
  for (int i = 2; i <= 1 + calls; ++i) {
    EXPECT_TRUE(service_.WaitClosed(absl::StrCat("s", i))) << "s" << i;
  }
}

TEST_P(RecoveryTest, WithoutACallbackADegradedSessionStaysLocal) {
  const SessionConfig config = SmallConfig("window", 4, ElementType::kF32);
  const std::vector<StoryStep> story = MakeStory(config.shape, 0, 30);
  Engine engine(story);
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(config, Options(nullptr)));
  service_.swallow_steps = true;
  size_t t = 0;
  ASSERT_OK(session->Step(engine.Request(t++)));
  service_.swallow_steps = false;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Milliseconds(400)) {
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome,
                         session->Step(engine.Request(t++)));
    EXPECT_TRUE(outcome.fallback);
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(session->degraded());
  EXPECT_EQ(session->counters().recovery_attempts, 0);
  EXPECT_EQ(service_.creates(), 1);
  // The log says it will not come back.
  EXPECT_THAT(Log(), ElementsAre(AllOf(HasSubstr("lost the sidecar"),
                                       HasSubstr("for the rest of its life"),
                                       HasSubstr("no live_keys"))));
}

// A DecodeBatch's sessions recover too, each through the batch, and a late
// answer on the batch's stream is never read as a later message's: the batch
// ends that stream and the next attach or step uses a new one.
TEST_P(RecoveryTest, BatchSessionsRecoverOnANewStreamOfTheBatch) {
  const SessionConfig config = SmallConfig("window", 6, ElementType::kF32);
  const std::vector<StoryStep> story = MakeStory(config.shape, 2, 6);
  Engine engine_a(story), engine_b(story), engine_c(story);
  std::unique_ptr<DecodeBatch> batch = client_->CreateBatch(GetParam());
  ASSERT_OK_AND_ASSIGN(auto a,
                       batch->CreateSession(config, Options(&engine_a)));
  ASSERT_OK_AND_ASSIGN(auto b,
                       batch->CreateSession(config, Options(&engine_b)));
  EXPECT_EQ(a->id(), "s1");
  EXPECT_EQ(b->id(), "s2");
  auto outcomes = batch->Step({{a.get(), engine_a.Request(0)},
                               {b.get(), engine_b.Request(0)}});
  for (const auto& outcome : outcomes) {
    ASSERT_OK(outcome.status());
    EXPECT_FALSE(outcome->fallback);
  }

  // a's step is answered after its 50 ms deadline: decided locally.
  service_.answer_delay_ms = 200;
  outcomes = batch->Step({{a.get(), engine_a.Request(1)}});
  ASSERT_OK(outcomes[0].status());
  EXPECT_TRUE(outcomes[0]->fallback);
  EXPECT_TRUE(a->degraded());
  service_.answer_delay_ms = 0;

  // b was not in that message, but was attached to the stream that ended:
  // its server session may be ahead of the engine, so b degrades too.
  outcomes = batch->Step({{b.get(), engine_b.Request(1)}});
  ASSERT_OK(outcomes[0].status());
  EXPECT_TRUE(outcomes[0]->fallback);
  EXPECT_TRUE(b->degraded());

  // A session created now attaches to a new stream and is served; the late
  // answer (due 200 ms after a's step) is never taken for its attach or step.
  ASSERT_OK_AND_ASSIGN(auto c,
                       batch->CreateSession(config, Options(&engine_c)));
  EXPECT_FALSE(c->degraded());
  EXPECT_EQ(c->id(), "s3");
  absl::SleepFor(absl::Milliseconds(200));
  outcomes = batch->Step({{c.get(), engine_c.Request(0)}});
  ASSERT_OK(outcomes[0].status());
  EXPECT_FALSE(outcomes[0]->fallback);
  EXPECT_EQ(outcomes[0]->step, 0u);

  // After recovery_interval, a and b re-create their server sessions on the
  // batch's stream and re-send their live entries with the step.
  outcomes = batch->Step({{a.get(), engine_a.Request(2)},
                          {b.get(), engine_b.Request(2)},
                          {c.get(), engine_c.Request(1)}});
  for (const auto& outcome : outcomes) {
    ASSERT_OK(outcome.status());
    EXPECT_FALSE(outcome->fallback);
  }
  EXPECT_FALSE(a->degraded());
  EXPECT_FALSE(b->degraded());
  EXPECT_EQ(a->counters().recoveries, 1);
  EXPECT_EQ(b->counters().recoveries, 1);
  EXPECT_EQ(service_.creates(), 5);
  EXPECT_TRUE(service_.WaitClosed("s1"));
  EXPECT_TRUE(service_.WaitClosed("s2"));
  std::map<std::string, std::vector<uint64_t>> resent;
  for (const ReceivedStep& step : service_.steps()) {
    if (step.step == 2 && step.session_id != c->id()) {
      resent[step.session_id] = step.slot_ids;
    }
  }
  // Each new server session got the engine's live entries (1000..1002; the
  // window of 6 evicted none) and then the step's own 1003.
  ASSERT_EQ(resent.size(), 2u);
  for (const auto& [id, slots] : resent) {
    EXPECT_TRUE(id == a->id() || id == b->id()) << id;
    EXPECT_THAT(slots, ElementsAre(1000, 1001, 1002, 1003)) << id;
  }
}

TEST_P(RecoveryTest, GatheredSessionsRecoverThroughTheirBatch) {
  const SessionConfig config = SmallConfig("window", 6, ElementType::kF32);
  const std::vector<StoryStep> story = MakeStory(config.shape, 2, 60);
  Engine engine_a(story), engine_b(story), engine_c(story);
  std::unique_ptr<DecodeBatch> batch = client_->CreateBatch(GetParam());
  ASSERT_OK_AND_ASSIGN(auto a,
                       batch->CreateSession(config, Options(&engine_a)));
  ASSERT_OK_AND_ASSIGN(auto b,
                       batch->CreateSession(config, Options(&engine_b)));
  Session* sessions[] = {a.get(), b.get()};
  Engine* engines[] = {&engine_a, &engine_b};
  size_t t = 0;
  // One decode iteration through each session's own halves (one message);
  // each outcome's fallback flag.
  auto iteration = [&]() {
    std::vector<bool> fallback;
    for (int i = 0; i < 2; ++i) {
      EXPECT_OK(sessions[i]->StepAsync(engines[i]->Request(t)));
    }
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<StepOutcome> outcome = sessions[i]->Collect();
      EXPECT_OK(outcome.status());
      if (outcome.ok()) engines[i]->Free(*outcome);
      fallback.push_back(!outcome.ok() || outcome->fallback);
    }
    ++t;
    return fallback;
  };
  EXPECT_THAT(iteration(), ElementsAre(false, false));
  // The message is answered after its 50 ms deadline: both degrade.
  service_.answer_delay_ms = 200;
  EXPECT_THAT(iteration(), ElementsAre(true, true));
  EXPECT_TRUE(a->degraded());
  EXPECT_TRUE(b->degraded());
  service_.answer_delay_ms = 0;
  // After recovery_interval both re-create their server sessions from
  // their gathered steps, on a new stream of the batch.
  for (int k = 0; k < 40 && (a->degraded() || b->degraded()); ++k) {
    absl::SleepFor(absl::Milliseconds(25));
    iteration();
  }
  EXPECT_FALSE(a->degraded());
  EXPECT_FALSE(b->degraded());
  EXPECT_EQ(a->counters().recoveries, 1);
  EXPECT_EQ(b->counters().recoveries, 1);
  EXPECT_THAT(iteration(), ElementsAre(false, false));
  // A session attached while both have a step in flight: their answers are
  // read before the attach's, and each still reaches its own step.
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK(sessions[i]->StepAsync(engines[i]->Request(t)));
  }
  ASSERT_OK_AND_ASSIGN(auto c,
                       batch->CreateSession(config, Options(&engine_c)));
  EXPECT_FALSE(c->degraded());
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome, sessions[i]->Collect());
    EXPECT_FALSE(outcome.fallback);
    EXPECT_EQ(outcome.step, t);
  }
  EXPECT_EQ(service_.creates(), 5);
}

TEST_P(RecoveryTest, AnAttachWaitingForAnswersInFlightKeepsItsOwnDeadline) {
  const SessionConfig config = SmallConfig("window", 6, ElementType::kF32);
  const std::vector<StoryStep> story = MakeStory(config.shape, 2, 2);
  Engine engine_a(story);
  std::unique_ptr<DecodeBatch> batch = client_->CreateBatch(GetParam());
  SessionOptions options = Options(&engine_a);
  options.step_deadline = absl::Seconds(2);
  options.create_deadline = absl::Milliseconds(100);
  ASSERT_OK_AND_ASSIGN(auto a, batch->CreateSession(config, options));
  // a's step is answered 250 ms late, within its own deadline; a session
  // created meanwhile waits for that answer, then has its 100 ms to attach.
  service_.answer_delay_ms = 250;
  ASSERT_OK(a->StepAsync(engine_a.Request(0)));
  ASSERT_OK_AND_ASSIGN(auto b, batch->CreateSession(config, options));
  EXPECT_FALSE(b->degraded()) << b->degraded_reason();
  ASSERT_OK_AND_ASSIGN(StepOutcome outcome, a->Collect());
  EXPECT_FALSE(outcome.fallback);
  EXPECT_FALSE(a->degraded());
  service_.answer_delay_ms = 0;
}

INSTANTIATE_TEST_SUITE_P(BothStreamApis, RecoveryTest,
                         testing::BothStreamApis(), testing::StreamApiName);

}  // namespace
}  // namespace entrokv
