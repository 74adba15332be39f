// The entropy budget controller (docs/step-semantics.md section 6), by hand
// over a few steps and against a naive reference of the formula.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core_test_util.h"
#include "entrokv/core/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace entrokv {
namespace {

using ::entrokv::testing::TinyConfig;
using ::entrokv::testing::TinySession;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// B_t of section 6, written independently of core.
class ReferenceEntropyBudget {
 public:
  ReferenceEntropyBudget(int64_t budget, const EntropyBudgetParams& p)
      : budget_(budget), p_(p) {}

  int64_t Next(double h) {
    if (!started_) {
      mu_ = h;
      var_ = 0.0;
      started_ = true;
    }
    const double lo = p_.min_budget == 0 ? 1.0 : double(p_.min_budget);
    const double hi = p_.max_budget == 0
                          ? std::ceil(double(budget_) * (1.0 + p_.gamma))
                          : double(p_.max_budget);
    const double raw =
        double(budget_) *
        (1.0 + p_.gamma * std::tanh((h - mu_) / (std::sqrt(var_) + p_.epsilon)));
    const int64_t b = std::clamp<int64_t>(std::llround(raw), int64_t(lo),
                                          int64_t(hi));
    var_ = (1.0 - p_.ema_rate) *
           (var_ + p_.ema_rate * (h - mu_) * (h - mu_));
    mu_ += p_.ema_rate * (h - mu_);
    return b;
  }

 private:
  int64_t budget_;
  EntropyBudgetParams p_;
  bool started_ = false;
  double mu_ = 0.0;
  double var_ = 0.0;
};

class EntropyBudgetTest : public ::testing::Test {
 protected:
  // Window ranking (so evictions are simply the oldest), entropy control,
  // B = 10, γ = 0.5, r = 0.5, ε = 1e-3.
  static SessionConfig Config(int64_t min_budget = 0, int64_t max_budget = 0) {
    SessionConfig config =
        TinyConfig(Ranking::kWindow, BudgetControl::kEntropy, /*budget=*/10);
    config.entropy_budget.gamma = 0.5;
    config.entropy_budget.ema_rate = 0.5;
    config.entropy_budget.epsilon = 1e-3;
    config.entropy_budget.min_budget = min_budget;
    config.entropy_budget.max_budget = max_budget;
    return config;
  }

  // The entropies of the story and, by hand:
  //  t=1 H=1:    μ=1, var=0 -> tanh(0) = 0 -> 10; then var 0, μ 1.
  //  t=2 H=2:    (2−1)/(0+ε) = 1000 -> tanh 1 -> 15; var .25, μ 1.5.
  //  t=3 H=1:    (1−1.5)/(.5+ε) -> tanh(−.998) = −.7608 -> 6.196 -> 6;
  //              var .1875, μ 1.25.
  //  t=4 H=1.25: 0 -> 10; var .09375, μ 1.25.
  //  t=5 H=0:    −1.25/(.30619+ε) -> tanh(−4.07) = −.99942 -> 5.003 -> 5.
  static constexpr double kEntropies[] = {1.0, 2.0, 1.0, 1.25, 0.0};
};

TEST_F(EntropyBudgetTest, UncertainStepsRaiseAndConfidentStepsLowerTheBudget) {
  TinySession session(Config());
  std::vector<int64_t> budgets;
  session.AppendZeros(0, 12);
  budgets.push_back(session.StepFlat(kEntropies[0]).budget);
  for (int t = 1; t < 5; ++t) {
    session.AppendZeros(11 + t, 1);
    budgets.push_back(session.StepFlat(kEntropies[t]).budget);
  }
  EXPECT_THAT(budgets, ElementsAre(10, 15, 6, 10, 5));
  EXPECT_EQ(session.session().Stats().budget, 5);
}

TEST_F(EntropyBudgetTest, AFallInTheBudgetEvictsSeveralAtOnce) {
  TinySession session(Config());
  session.AppendZeros(0, 12);
  EXPECT_THAT(session.StepFlat(1.0).evicted, ElementsAre(0, 1));
  session.AppendZeros(12, 1);
  EXPECT_THAT(session.StepFlat(2.0).evicted, IsEmpty());  // 11 live ≤ 15.
  session.AppendZeros(13, 1);
  const StepResult fall = session.StepFlat(1.0);  // 12 live, B_t = 6.
  EXPECT_THAT(fall.evicted, ElementsAre(2, 3, 4, 5, 6, 7));
  EXPECT_EQ(fall.live, 6);
  session.AppendZeros(14, 1);
  EXPECT_THAT(session.StepFlat(1.25).evicted, IsEmpty());
  session.AppendZeros(15, 1);
  EXPECT_THAT(session.StepFlat(0.0).evicted, ElementsAre(8, 9, 10));
  EXPECT_THAT(session.Live(), ElementsAre(11, 12, 13, 14, 15));
}

TEST_F(EntropyBudgetTest, MinAndMaxBudgetClampTheBudget) {
  TinySession session(Config(/*min_budget=*/8, /*max_budget=*/12));
  std::vector<int64_t> budgets;
  for (double h : kEntropies) {
    budgets.push_back(session.StepFlat(h).budget);
  }
  EXPECT_THAT(budgets, ElementsAre(10, 12, 8, 10, 8));
}

TEST_F(EntropyBudgetTest, ZeroMinBudgetMeansOne) {
  // B = 2, γ = 0.9: a confident step asks for round(0.2) = 0, clamped to 1.
  SessionConfig config = Config();
  config.budget = 2;
  config.entropy_budget.gamma = 0.9;
  TinySession session(config);
  EXPECT_EQ(session.StepFlat(5.0).budget, 2);
  EXPECT_EQ(session.StepFlat(0.0).budget, 1);
}

TEST_F(EntropyBudgetTest, RoundsHalfAwayFromZero) {
  // B = 3, γ = 0.5: an uncertain step gives exactly 4.5, which llround makes
  // 5 (round-half-even would give 4); the default max is ceil(4.5) = 5.
  SessionConfig config = Config();
  config.budget = 3;
  TinySession session(config);
  EXPECT_EQ(session.StepFlat(1.0).budget, 3);
  EXPECT_EQ(session.StepFlat(2.0).budget, 5);
}

TEST_F(EntropyBudgetTest, EntropyFromLogitsDrivesTheBudget) {
  // Logits of two and of four equal values: H = ln 2, then ln 4 > μ.
  SessionConfig config = Config();
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_TRUE(backend.ok());
  auto session = (*backend)->CreateSession(config, {});
  ASSERT_TRUE(session.ok()) << session.status();
  testing::StepBuilder first(config.shape);
  first.Query({0.0f, 0.0f}).Logits({1.0f, 1.0f});
  StepResult result;
  ASSERT_TRUE((*session)->Step(first.Build(1), &result).ok());
  EXPECT_NEAR(result.entropy, std::log(2.0), 1e-9);
  EXPECT_EQ(result.budget, 10);
  testing::StepBuilder second(config.shape);
  second.Query({0.0f, 0.0f}).Logits({0.0f, 0.0f, 0.0f, 0.0f});
  ASSERT_TRUE((*session)->Step(second.Build(2), &result).ok());
  EXPECT_NEAR(result.entropy, std::log(4.0), 1e-9);
  EXPECT_EQ(result.budget, 15);
}

TEST_F(EntropyBudgetTest, MatchesTheReferenceOverALongRun) {
  SessionConfig config = Config();
  config.budget = 37;
  config.entropy_budget.gamma = 0.6;
  config.entropy_budget.ema_rate = 0.07;
  config.entropy_budget.epsilon = 0.05;
  ReferenceEntropyBudget reference(config.budget, config.entropy_budget);
  TinySession session(config);
  uint64_t slot = 0;
  for (int t = 0; t < 300; ++t) {
    const double h = 1.2 + std::sin(t * 0.37) + 0.6 * std::cos(t * 1.3);
    session.AppendZeros(slot++, 1);
    const StepResult result = session.StepFlat(std::max(h, 0.0));
    ASSERT_EQ(result.budget, reference.Next(std::max(h, 0.0))) << "step " << t;
    ASSERT_LE(result.live, std::max<int64_t>(result.budget, 0));
  }
}

}  // namespace
}  // namespace entrokv
