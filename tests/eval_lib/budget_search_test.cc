#include "eval/lib/budget_search.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace entrokv::eval {
namespace {

using ::testing::ElementsAre;

// A toy decider whose mean live is a known function of the budget, counting
// the budgets it was asked for.
class ToyCurve {
 public:
  explicit ToyCurve(std::function<double(int64_t)> f) : f_(std::move(f)) {}
  absl::StatusOr<double> operator()(int64_t budget) {
    ++calls_;
    asked_.insert(budget);
    order_.push_back(budget);
    return f_(budget);
  }
  int calls() const { return calls_; }
  const std::set<int64_t>& asked() const { return asked_; }
  // The budgets asked for, in order.
  const std::vector<int64_t>& order() const { return order_; }

 private:
  std::function<double(int64_t)> f_;
  int calls_ = 0;
  std::set<int64_t> asked_;
  std::vector<int64_t> order_;
};

// The search as entrokv-eval runs it: budgets 1 to 512, secant steps.
absl::StatusOr<BudgetSearchResult> Search(ToyCurve* curve, double target,
                                          double tolerance,
                                          std::map<int64_t, double>* known,
                                          int64_t first_guess = 0) {
  return SearchBudget(
      {.target = target,
       .tolerance = tolerance,
       .min_budget = 1,
       .max_budget = 512,
       .first_guess = first_guess},
      [curve](int64_t b) { return (*curve)(b); }, known);
}

TEST(SearchBudgetTest, LandsWithinToleranceOnAFixedLikeCurve) {
  // A fixed budget: live grows by one per token up to B + 1, so the mean over
  // sequences of ~300 tokens is a little under B + 1.
  auto f = [](int64_t b) { return 0.93 * static_cast<double>(b) - 1.7; };
  for (double target : {24.0, 32.0, 48.0, 64.0, 96.0}) {
    ToyCurve curve(f);
    std::map<int64_t, double> known;
    absl::StatusOr<BudgetSearchResult> r =
        Search(&curve, target, 0.01 * target, &known);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->found());
    if (r->hit >= 0) {
      EXPECT_LE(std::abs(f(r->hit) - target), 0.01 * target) << target;
    } else {
      EXPECT_EQ(r->hi, r->lo + 1);
      EXPECT_LE(f(r->lo), target);
      EXPECT_GT(f(r->hi), target);
    }
    EXPECT_LE(curve.calls(), 6) << target;
    EXPECT_EQ(r->probes, curve.calls());
  }
}

TEST(SearchBudgetTest, ZeroToleranceEndsOnTheAdjacentBracketingPair) {
  // A staircase: mean live floor(B / 3). Target 10.5 lies between
  // f(32) = 10 and f(33) = 11, the only adjacent pair around it.
  ToyCurve curve([](int64_t b) { return static_cast<double>(b / 3); });
  std::map<int64_t, double> known;
  absl::StatusOr<BudgetSearchResult> r = Search(&curve, 10.5, 0.0, &known);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hit, -1);
  EXPECT_EQ(r->lo, 32);
  EXPECT_EQ(r->hi, 33);
}

TEST(SearchBudgetTest, ConcaveCurveLikeTheEntropyController) {
  // The entropy controller holds far fewer entries than its nominal budget,
  // and less so as B grows.
  auto f = [](int64_t b) {
    return 60.0 * std::log1p(static_cast<double>(b) / 90.0);
  };
  ToyCurve curve(f);
  std::map<int64_t, double> known;
  absl::StatusOr<BudgetSearchResult> r = Search(&curve, 48.0, 0.48, &known);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->found());
  if (r->hit >= 0) {
    EXPECT_LE(std::abs(f(r->hit) - 48.0), 0.48);
  } else {
    EXPECT_EQ(r->hi, r->lo + 1);
    EXPECT_LE(f(r->lo), 48.0);
    EXPECT_GT(f(r->hi), 48.0);
  }
  EXPECT_LE(curve.calls(), 10);
}

TEST(SearchBudgetTest, ReusesKnownRunsAndTakesTheFirstGuess) {
  auto f = [](int64_t b) { return static_cast<double>(b) - 2.0; };
  ToyCurve curve(f);
  std::map<int64_t, double> known;
  // A guess that lands exactly: one probe.
  absl::StatusOr<BudgetSearchResult> r = Search(&curve, 40.0, 0.4, &known, 42);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit, 42);
  EXPECT_EQ(curve.calls(), 1);
  // The same target again: answered from what is known, no probe.
  r = Search(&curve, 40.0, 0.4, &known, 7);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit, 42);
  EXPECT_EQ(r->probes, 0);
  EXPECT_EQ(curve.calls(), 1);
}

TEST(SearchBudgetTest, UnreachableTargetIsNotFound) {
  // Nothing is evicted past 100: mean live never exceeds 100.
  ToyCurve curve([](int64_t b) { return std::min<double>(b, 100.0); });
  std::map<int64_t, double> known;
  absl::StatusOr<BudgetSearchResult> r = Search(&curve, 150.0, 0.0, &known);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->found());
  EXPECT_TRUE(curve.asked().count(512));  // It tried the largest budget.
}

// Mean live b / 2: every probe below is worked out by hand in its comment.
double Half(int64_t b) { return static_cast<double>(b) / 2.0; }

TEST(SearchBudgetTest, SecantStepsByHand) {
  // Nothing known: the target rounded, 10 (mean 5). From below only: slope
  // 5 / 10 = 0.5, a step of round(5.25 / 0.5) = 11 to 21 (mean 10.5). Then
  // the secant between (10, 5) and (21, 10.5) meets 10.25 at 20.5, rounded
  // to 21 and clamped into (10, 21): 20 (mean 10 <= 10.25). 20 and 21 are
  // adjacent.
  ToyCurve curve(Half);
  std::map<int64_t, double> known;
  absl::StatusOr<BudgetSearchResult> r = Search(&curve, 10.25, 0.0, &known);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(curve.order(), ElementsAre(10, 21, 20));
  EXPECT_EQ(r->lo, 20);
  EXPECT_EQ(r->hi, 21);
  EXPECT_EQ(r->hit, -1);
  EXPECT_EQ(r->probes, 3);
}

// The search as entrokv-sim's calibration runs it: both ends known, then
// bisection only, no hit.
absl::StatusOr<BudgetSearchResult> Bisect(ToyCurve* curve, double target,
                                          double tolerance) {
  std::map<int64_t, double> known = {{1, Half(1)}, {64, Half(64)}};
  return SearchBudget(
      {.target = target,
       .tolerance = tolerance,
       .min_budget = 1,
       .max_budget = 64,
       .secant_iterations = 0},
      [curve](int64_t b) { return (*curve)(b); }, &known);
}

TEST(SearchBudgetTest, BisectionFromBothEndsByHand) {
  // Between 1 and 64, target 10: midpoints 1 + 63 / 2 = 32 (16, above),
  // 1 + 31 / 2 = 16 (8, below), 24 (12, above), 20 (10, not above), 22 (11,
  // above), 21 (10.5, above). With a negative tolerance the exact 10 at 20
  // is no hit: the search ends on the adjacent pair 20, 21.
  ToyCurve curve(Half);
  absl::StatusOr<BudgetSearchResult> r = Bisect(&curve, 10.0, -1.0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(curve.order(), ElementsAre(32, 16, 24, 20, 22, 21));
  EXPECT_EQ(r->hit, -1);
  EXPECT_EQ(r->lo, 20);
  EXPECT_EQ(r->hi, 21);
  EXPECT_EQ(r->probes, 6);
}

TEST(SearchBudgetTest, ZeroToleranceStopsAtAnExactHit) {
  // The same bisection stops at 20, whose mean live is the target exactly.
  ToyCurve curve(Half);
  absl::StatusOr<BudgetSearchResult> r = Bisect(&curve, 10.0, 0.0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(curve.order(), ElementsAre(32, 16, 24, 20));
  EXPECT_EQ(r->hit, 20);
  EXPECT_EQ(r->lo, -1);
}

TEST(BisectNearestBudgetTest, NearestProbeWinsByHand) {
  // [1, 40], target 10.2: 20 (10, gap 0.2, below: go up), 30 (15, down),
  // 25 (12.5, down), 22 (11, down), 21 (10.5, gap 0.3, down); the range is
  // empty. The nearest probe is 20.
  ToyCurve curve(Half);
  absl::StatusOr<int64_t> best = BisectNearestBudget(
      10.2, 1, 40, [&curve](int64_t b) { return curve(b); });
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_THAT(curve.order(), ElementsAre(20, 30, 25, 22, 21));
  EXPECT_EQ(*best, 20);
}

TEST(BisectNearestBudgetTest, FirstProbedWinsATie) {
  // Target 10.25: 20 (10) and 21 (10.5) are both 0.25 away; 20 came first.
  ToyCurve curve(Half);
  absl::StatusOr<int64_t> best = BisectNearestBudget(
      10.25, 1, 40, [&curve](int64_t b) { return curve(b); });
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(*best, 20);
}

TEST(LowerIsNearerTest, TieGoesToTheLowerBudget) {
  EXPECT_TRUE(LowerIsNearer(9.0, 11.0, 10.0));
  EXPECT_TRUE(LowerIsNearer(9.5, 11.0, 10.0));
  EXPECT_FALSE(LowerIsNearer(9.0, 10.5, 10.0));
}

}  // namespace
}  // namespace entrokv::eval
