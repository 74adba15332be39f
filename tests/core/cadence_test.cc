// Decision cadence (docs/step-semantics.md section 11): appends every step,
// decisions every decide_every-th step or when the hard ceiling would be
// passed. Expected evictions are worked out by hand from the section's rule.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core_test_util.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace entrokv::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

SessionConfig WindowCadence(int64_t budget, int32_t every, int64_t ceiling) {
  SessionConfig config =
      TinyConfig(Ranking::kWindow, BudgetControl::kFixed, budget);
  config.decide_every = every;
  config.hard_ceiling = ceiling;
  return config;
}

class CadenceTest : public ::testing::Test {
 protected:
  void Open(const SessionConfig& config) {
    config_ = config;
    auto backend = CreateBackend(BackendKind::kCpu);
    ASSERT_TRUE(backend.ok());
    backend_ = std::move(backend).value();
    auto session = backend_->CreateSession(config, {});
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = std::move(session).value();
  }
  // A step appending `slot` with key (1, 0); with a query (0, 0) when
  // `with_query`.
  absl::Status Step(uint64_t step, std::vector<uint64_t> slots, bool with_query,
                    StepResult* result) {
    StepBuilder b(config_.shape);
    for (uint64_t s : slots) b.Append(s, {1.0f, 0.0f});
    if (with_query) b.Query({0.0f, 0.0f});
    return session_->Step(b.Build(step), result);
  }

  SessionConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SessionState> session_;
};

TEST_F(CadenceTest, DecidesOnlyOnEveryKthStep) {
  Open(WindowCadence(/*budget=*/2, /*every=*/3, /*ceiling=*/0));
  StepResult r;
  ASSERT_TRUE(Step(10, {1}, false, &r).ok());
  EXPECT_THAT(r.evicted, IsEmpty());
  EXPECT_EQ(r.live, 1);
  ASSERT_TRUE(Step(11, {2}, false, &r).ok());
  EXPECT_THAT(r.evicted, IsEmpty());
  EXPECT_EQ(r.live, 2);
  // The 3rd accepted step decides: 3 live, budget 2, the oldest goes.
  ASSERT_TRUE(Step(12, {3}, true, &r).ok());
  EXPECT_THAT(r.evicted, ElementsAre(1));
  EXPECT_EQ(r.live, 2);
  ASSERT_TRUE(Step(13, {4}, false, &r).ok());
  ASSERT_TRUE(Step(14, {5}, false, &r).ok());
  EXPECT_EQ(r.live, 4);
  EXPECT_THAT(r.evicted, IsEmpty());
  // The 6th: 5 live, three oldest go at once.
  ASSERT_TRUE(Step(15, {6}, true, &r).ok());
  EXPECT_THAT(r.evicted, ElementsAre(2, 3, 4));
  EXPECT_THAT(session_->LiveSlots(), ElementsAre(5, 6));
  const SessionStats stats = session_->Stats();
  EXPECT_EQ(stats.steps, 6);
  EXPECT_EQ(stats.last_step, 15u);
  EXPECT_EQ(stats.appended, 6);
  EXPECT_EQ(stats.evicted, 4);
  EXPECT_EQ(stats.peak_live, 5);
}

TEST_F(CadenceTest, DecisionStepWithoutQueriesIsRejectedAndChangesNothing) {
  SessionConfig config = WindowCadence(2, 2, 0);
  config.ranking = Ranking::kAffinity;
  config.budget_control = BudgetControl::kEntropy;
  Open(config);
  StepResult r;
  // Step 1 decides nothing: neither queries nor entropy are needed.
  ASSERT_TRUE(Step(1, {1}, false, &r).ok());
  const absl::Status st = Step(2, {2}, false, &r);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("queries"));
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("decision step"));
  EXPECT_EQ(session_->Stats().live, 1);
  EXPECT_EQ(session_->Stats().steps, 1);
  // The same step with a query and entropy is accepted.
  StepBuilder b(config.shape);
  b.Append(2, {1.0f, 0.0f}).Query({0.0f, 0.0f}).Entropy(1.0);
  ASSERT_TRUE(session_->Step(b.Build(2), &r).ok());
  EXPECT_EQ(r.live, 2);
}

// The message of a decision step without queries names the field and the
// cadence, with the ordinal written as English writes it.
TEST_F(CadenceTest, AMissingQueryOnADecisionStepSaysWhichStepsDecide) {
  const struct {
    int32_t every;
    const char* says;
  } cases[] = {{2, "every 2nd accepted step"},   {3, "every 3rd accepted step"},
               {4, "every 4th accepted step"},   {11, "every 11th accepted step"},
               {12, "every 12th accepted step"}, {13, "every 13th accepted step"},
               {21, "every 21st accepted step"}, {22, "every 22nd accepted step"},
               {23, "every 23rd accepted step"}, {101, "every 101st accepted step"},
               {111, "every 111th accepted step"}};
  for (const auto& c : cases) {
    Open(WindowCadence(/*budget=*/1000, c.every, /*ceiling=*/0));
    StepResult r;
    for (int32_t i = 0; i + 1 < c.every; ++i) {
      ASSERT_TRUE(Step(i, {static_cast<uint64_t>(i)}, false, &r).ok());
    }
    const absl::Status status = Step(c.every - 1, {999999}, false, &r);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    const std::string message(status.message());
    EXPECT_THAT(message, ::testing::StartsWith("queries: "));
    EXPECT_THAT(message,
                ::testing::HasSubstr(absl::StrCat(c.says, " decides")))
        << c.every;
  }
}

TEST_F(CadenceTest, HardCeilingForcesADecision) {
  Open(WindowCadence(/*budget=*/2, /*every=*/100, /*ceiling=*/4));
  StepResult r;
  for (uint64_t s = 1; s <= 4; ++s) ASSERT_TRUE(Step(s, {s}, false, &r).ok());
  EXPECT_EQ(r.live, 4);
  // 4 live + 1 would pass 4: this step decides, so it needs its query.
  EXPECT_EQ(Step(5, {5}, false, &r).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Step(5, {5}, true, &r).ok());
  EXPECT_THAT(r.evicted, ElementsAre(1, 2, 3));
  EXPECT_EQ(r.live, 2);
}

TEST_F(CadenceTest, RejectsDuplicatesAgainstPendingEntriesAndGaps) {
  Open(WindowCadence(4, 4, 0));
  StepResult r;
  ASSERT_TRUE(Step(1, {7}, false, &r).ok());
  EXPECT_EQ(Step(2, {7}, false, &r).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Step(3, {8}, false, &r).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Step(1, {8}, false, &r).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Step(2, {8}, false, &r).ok());
  EXPECT_THAT(session_->LiveSlots(), ElementsAre(7, 8));
}

TEST_F(CadenceTest, PendingEntriesAreHeldAndCounted) {
  Open(WindowCadence(8, 4, 0));
  StepResult r;
  ASSERT_TRUE(Step(1, {1, 2, 3}, false, &r).ok());
  const SessionStats stats = session_->Stats();
  EXPECT_EQ(stats.live, 3);
  // f32, d 2, one layer and kv head: 8 key bytes + 40 of state per entry.
  EXPECT_EQ(stats.bytes_held, 3 * (8 + 40));
  EXPECT_EQ(backend_->bytes_held(), 3 * (8 + 40));
  session_.reset();
  EXPECT_EQ(backend_->bytes_held(), 0);
}

TEST_F(CadenceTest, ByteLimitCountsPendingEntries) {
  auto backend = CreateBackend(BackendKind::kCpu, {.max_bytes = 3 * 48});
  ASSERT_TRUE(backend.ok());
  backend_ = std::move(backend).value();
  config_ = WindowCadence(8, 4, 0);
  session_ = std::move(backend_->CreateSession(config_, {})).value();
  StepResult r;
  ASSERT_TRUE(Step(1, {1, 2}, false, &r).ok());
  EXPECT_EQ(Step(2, {3, 4}, false, &r).code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(Step(2, {3}, false, &r).ok());
  EXPECT_EQ(backend_->bytes_held(), 3 * 48);
}

// The rule of section 11: a session with decide_every = K makes the same
// decisions as a K = 1 session that is sent, at each decision step, every
// entry appended since the previous decision, with the decision step's
// queries and entropy.
TEST(CadenceEquivalenceTest, DecidesAsAnEverySessionFedOnlyDecisions) {
  for (const auto& [ranking, control] : AllPolicies()) {
    SessionConfig config;
    config.ranking = ranking;
    config.budget_control = control;
    SCOPED_TRACE(PolicyName(config));
    Shape shape;
    shape.layers = 2;
    shape.kv_heads = 2;
    shape.q_heads = 4;
    shape.head_dim = 16;
    shape.element_type = ElementType::kF32;
    config.shape = shape;
    config.budget = 12;
    config.protection.sinks = 1;
    SessionConfig every = config;
    config.decide_every = 4;
    auto backend = std::move(CreateBackend(BackendKind::kCpu)).value();
    auto cadenced = std::move(backend->CreateSession(config, {})).value();
    auto reference = std::move(backend->CreateSession(every, {})).value();
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    StepBuilder batch(shape);
    uint64_t slot = 0;
    for (uint64_t step = 0; step < 48; ++step) {
      StepBuilder b(shape);
      const int appended = step % 5 == 0 ? 3 : 1;
      for (int e = 0; e < appended; ++e) {
        std::vector<float> key(shape.key_elements());
        for (float& v : key) v = normal(rng);
        b.Append(slot, key);
        batch.Append(slot, key);
        ++slot;
      }
      std::vector<float> query(shape.query_elements());
      for (float& v : query) v = normal(rng);
      const double h = 0.5 + std::abs(normal(rng));
      const bool decides = (step + 1) % 4 == 0;
      if (decides) b.Query(query).Entropy(h);
      StepResult got;
      ASSERT_TRUE(cadenced->Step(b.Build(step), &got).ok());
      if (!decides) {
        EXPECT_THAT(got.evicted, IsEmpty());
        continue;
      }
      batch.Query(query).Entropy(h);
      StepResult want;
      ASSERT_TRUE(reference->Step(batch.Build(step / 4), &want).ok());
      // The random ranking hashes the step number, which differs here.
      if (ranking != Ranking::kRandom) {
        EXPECT_EQ(got.evicted, want.evicted) << "step " << step;
      }
      EXPECT_EQ(got.live, want.live);
      EXPECT_EQ(got.budget, want.budget);
      batch = StepBuilder(shape);
    }
  }
}

TEST(CadenceConfigTest, RejectsBadCadenceSettings) {
  SessionConfig config = TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 8);
  config.decide_every = 0;
  EXPECT_THAT(std::string(ValidateSessionConfig(config).message()),
              ::testing::HasSubstr("decide_every"));
  config.decide_every = 4;
  config.hard_ceiling = 7;
  EXPECT_THAT(std::string(ValidateSessionConfig(config).message()),
              ::testing::HasSubstr("hard_ceiling"));
  config.hard_ceiling = 8;
  EXPECT_TRUE(ValidateSessionConfig(config).ok());
}

}  // namespace
}  // namespace entrokv::testing
