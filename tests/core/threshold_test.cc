// The threshold budget control (docs/step-semantics.md sections 6 and 8) on
// tiny cases whose attention shares are worked out here, not by the backend.
// One layer, one head, d = 2, f32 (TinySession: Step(x, y) sends a query
// whose scaled logit of key k is x·k0 + y·k1).

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core_test_util.h"
#include "entrokv/core/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::TinyConfig;
using ::entrokv::testing::TinySession;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Appends four entries whose logits under the query (1, 0) are ln 4, 0, 0,
// ln 2: attention shares 4/8, 1/8, 1/8 and 2/8.
void AppendFour(TinySession* session) {
  session->Append(1, std::log(4.0f), 0.0f)
      .Append(2, 0.0f, 0.0f)
      .Append(3, 0.0f, 0.0f)
      .Append(4, std::log(2.0f), 0.0f);
}

SessionConfig TovaThreshold(int64_t budget, double tau, int64_t recent) {
  SessionConfig config =
      TinyConfig(Ranking::kTova, BudgetControl::kThreshold, budget);
  config.threshold.tau = tau;
  config.protection.recent = recent;
  return config;
}

TEST(ThresholdTest, EvictsWhatScoresBelowTauUnderTheCeiling) {
  // Budget 10 is far away: only the threshold evicts. Shares 0.5, 0.125,
  // 0.125, 0.25; entry 4 is the protected recent one; below 0.2: 2 and 3.
  TinySession session(TovaThreshold(/*budget=*/10, /*tau=*/0.2, /*recent=*/1));
  AppendFour(&session);
  const StepResult result = session.Step(1.0f, 0.0f);
  EXPECT_THAT(result.evicted, ElementsAre(2, 3));
  EXPECT_EQ(result.live, 2);
  EXPECT_EQ(result.budget, 10);
  EXPECT_NEAR(session.RankScore(2), 0.125, 1e-6);
}

TEST(ThresholdTest, TheCeilingStillHolds) {
  // Budget 1, nothing protected: the three smallest go (2 and 3 below tau,
  // then 4 at 0.25 for the ceiling); 1 stays.
  TinySession session(TovaThreshold(/*budget=*/1, /*tau=*/0.2, /*recent=*/0));
  AppendFour(&session);
  const StepResult result = session.Step(1.0f, 0.0f);
  EXPECT_THAT(result.evicted, ElementsAre(2, 3, 4));
  EXPECT_THAT(session.Live(), ElementsAre(1));
}

TEST(ThresholdTest, TheRecentWindowIsNeverEvicted) {
  // recent = 2 protects 3 and 4: of those below tau only 2 goes.
  TinySession session(TovaThreshold(/*budget=*/10, /*tau=*/0.2, /*recent=*/2));
  AppendFour(&session);
  EXPECT_THAT(session.Step(1.0f, 0.0f).evicted, ElementsAre(2));
  // Next step, entry 5 (logit 0) arrives and 3 leaves the window. Live 1, 3,
  // 4, 5 have logits ln 4, 0, ln 2, 0: shares 4/8, 1/8, 2/8, 1/8; 3 (0.125)
  // is now unprotected and goes; 4 and 5 are the window.
  session.Append(5, 0.0f, 0.0f);
  EXPECT_THAT(session.Step(1.0f, 0.0f).evicted, ElementsAre(3));
  EXPECT_THAT(session.Live(), ElementsAre(1, 4, 5));
}

TEST(ThresholdTest, BlocksGoWholeWhenTheirScoreIsBelowTau) {
  // Blocks of 2: {1, 2} scores (0.5 + 0.125) / 2 = 0.3125 and {3, 4}
  // (0.125 + 0.25) / 2 = 0.1875 < 0.2.
  SessionConfig config = TovaThreshold(/*budget=*/10, /*tau=*/0.2, 0);
  config.block_size = 2;
  TinySession session(config);
  AppendFour(&session);
  EXPECT_THAT(session.Step(1.0f, 0.0f).evicted, ElementsAre(3, 4));
  // With max, {3, 4} scores 0.25 and stays.
  config.block_reduce = BlockReduce::kMax;
  TinySession max_session(config);
  AppendFour(&max_session);
  EXPECT_TRUE(max_session.Step(1.0f, 0.0f).evicted.empty());
}

TEST(ThresholdTest, AVeryLowTauIsTheFixedBudget) {
  // No keep score is below -1e300: the ceiling alone decides, as fixed.
  for (Ranking ranking : {Ranking::kTova, Ranking::kAffinity, Ranking::kH2o,
                          Ranking::kKeyDiff}) {
    SessionConfig threshold =
        TinyConfig(ranking, BudgetControl::kThreshold, /*budget=*/5);
    threshold.threshold.tau = -1e300;
    threshold.protection.sinks = 1;
    SessionConfig fixed = threshold;
    fixed.budget_control = BudgetControl::kFixed;
    TinySession a(threshold), b(fixed);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    for (int t = 0; t < 40; ++t) {
      const float k0 = normal(rng), k1 = normal(rng);
      a.Append(100 + t, k0, k1);
      b.Append(100 + t, k0, k1);
      const float x = normal(rng), y = normal(rng);
      const double h = std::fabs(normal(rng));
      const StepResult ra = a.Step(x, y, h);
      const StepResult rb = b.Step(x, y, h);
      ASSERT_EQ(ra.evicted, rb.evicted) << RankingName(ranking) << " " << t;
      ASSERT_EQ(ra.budget, rb.budget);
    }
  }
}

TEST(ThresholdTest, BadConfigurationsAreRefused) {
  SessionConfig config =
      TinyConfig(Ranking::kWindow, BudgetControl::kThreshold, /*budget=*/4);
  absl::Status st = ValidateSessionConfig(config);
  EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("budget_control"));
  config.ranking = Ranking::kStreaming;
  EXPECT_STATUS_CODE(ValidateSessionConfig(config),
                     absl::StatusCode::kInvalidArgument);
  config.ranking = Ranking::kTova;
  EXPECT_OK(ValidateSessionConfig(config));
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()}) {
    config.threshold.tau = bad;
    st = ValidateSessionConfig(config);
    EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(st.message(), HasSubstr("threshold.tau"));
  }
  SessionConfig parsed;
  ASSERT_OK(ApplyPolicyName("tova+threshold", &parsed));
  EXPECT_EQ(parsed.budget_control, BudgetControl::kThreshold);
  EXPECT_FALSE(PolicyNeedsEntropy(parsed));
}

}  // namespace
}  // namespace entrokv
