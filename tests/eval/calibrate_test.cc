#include "tinyllama/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace entrokv::tinyllama {
namespace {

// A toy decider whose mean live is a known function of the budget, counting
// the budgets it was asked for.
class ToyCurve {
 public:
  explicit ToyCurve(std::function<double(int64_t)> f) : f_(std::move(f)) {}
  absl::StatusOr<double> operator()(int64_t budget) {
    ++calls_;
    asked_.insert(budget);
    return f_(budget);
  }
  int calls() const { return calls_; }
  const std::set<int64_t>& asked() const { return asked_; }

 private:
  std::function<double(int64_t)> f_;
  int calls_ = 0;
  std::set<int64_t> asked_;
};

absl::StatusOr<BudgetSearchResult> Search(ToyCurve* curve, double target,
                                          double tolerance,
                                          std::map<int64_t, double>* known,
                                          int64_t first_guess = 0) {
  return SearchBudget(
      target, tolerance, 1, 512, first_guess,
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

TEST(PairedBootstrapTest, TwoStoriesByHand) {
  // Story 1: 10 tokens, NLL 10 -> 11; story 2: 20 tokens, NLL 20 -> 18.
  // Point estimate: exp((1 - 2) / 30) - 1. A resample holds story 1 twice
  // (p = 1/4), story 2 twice (p = 1/4) or both (p = 1/2), so the 2.5% and
  // 97.5% quantiles of 2000 resamples are the two one-story values:
  // exp(-2 / 20) - 1 and exp(1 / 10) - 1.
  const PairedDifference d =
      PairedBootstrap({10.0, 20.0}, {11.0, 18.0}, {10, 20}, 2000, 7, 0.95);
  EXPECT_NEAR(d.pct, 100.0 * (std::exp(-1.0 / 30.0) - 1.0), 1e-9);
  EXPECT_NEAR(d.pct, -3.2784, 1e-4);
  EXPECT_NEAR(d.lo_pct, -9.5163, 1e-4);
  EXPECT_NEAR(d.hi_pct, 10.5171, 1e-4);
  EXPECT_FALSE(d.significant());
}

TEST(PairedBootstrapTest, IdenticalRunsDifferByNothing) {
  const PairedDifference d = PairedBootstrap({5.0, 7.0, 9.0}, {5.0, 7.0, 9.0},
                                             {4, 6, 8}, 500, 1, 0.95);
  EXPECT_EQ(d.pct, 0.0);
  EXPECT_EQ(d.lo_pct, 0.0);
  EXPECT_EQ(d.hi_pct, 0.0);
  EXPECT_FALSE(d.significant());
}

TEST(PairedBootstrapTest, IsSeededAndDetectsAClearDifference) {
  std::vector<double> a, b;
  std::vector<int64_t> n;
  for (int s = 0; s < 40; ++s) {
    n.push_back(200 + 5 * s);
    a.push_back(1.3 * n.back());
    b.push_back(a.back() + 0.02 * n.back() + ((s % 2) ? 1.0 : -1.0));
  }
  const PairedDifference x = PairedBootstrap(a, b, n, 1000, 3, 0.95);
  const PairedDifference y = PairedBootstrap(a, b, n, 1000, 3, 0.95);
  EXPECT_EQ(x.lo_pct, y.lo_pct);
  EXPECT_EQ(x.hi_pct, y.hi_pct);
  EXPECT_TRUE(x.significant());
  EXPECT_GT(x.lo_pct, 0.0);
  EXPECT_LT(x.lo_pct, x.pct);
  EXPECT_GT(x.hi_pct, x.pct);
}

TEST(PairedBootstrapTest, CoversTheTrueDifferenceAboutNinetyFivePercent) {
  // Paired synthetic stories: b_s - a_s = n_s·δ + noise, so the true
  // perplexity ratio is exp(δ).
  const double delta = 0.01;
  const double truth = 100.0 * (std::exp(delta) - 1.0);
  std::mt19937_64 rng(12345);
  std::normal_distribution<double> noise(0.0, 3.0);
  std::uniform_int_distribution<int> length(150, 450);
  const int trials = 400;
  int covered = 0;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<double> a, b;
    std::vector<int64_t> n;
    for (int s = 0; s < 50; ++s) {
      n.push_back(length(rng));
      a.push_back(1.3 * static_cast<double>(n.back()));
      b.push_back(a.back() + delta * static_cast<double>(n.back()) +
                  noise(rng));
    }
    const PairedDifference d = PairedBootstrap(a, b, n, 1000, trial, 0.95);
    covered += d.lo_pct <= truth && truth <= d.hi_pct;
  }
  const double coverage = static_cast<double>(covered) / trials;
  EXPECT_GE(coverage, 0.91);
  EXPECT_LE(coverage, 0.98);
}

TEST(SplitStoriesTest, TuneAndTestNeverOverlap) {
  const StorySplit s = SplitStories(227, 100, 0);
  ASSERT_EQ(s.tune.size(), 100u);
  ASSERT_EQ(s.test.size(), 127u);
  EXPECT_EQ(s.tune.front(), 0);
  EXPECT_EQ(s.tune.back(), 99);
  EXPECT_EQ(s.test.front(), 100);
  EXPECT_EQ(s.test.back(), 226);
  for (int total : {0, 1, 16, 227}) {
    for (int tune : {0, 1, 8, 100, 300}) {
      for (int test : {0, 1, 8, 500}) {
        const StorySplit split = SplitStories(total, tune, test);
        std::set<int> seen(split.tune.begin(), split.tune.end());
        for (int i : split.test) {
          EXPECT_TRUE(seen.insert(i).second)
              << "story " << i << " in both (" << total << ", " << tune << ", "
              << test << ")";
        }
        for (int i : seen) {
          EXPECT_GE(i, 0);
          EXPECT_LT(i, total);
        }
      }
    }
  }
}

TEST(SplitStoriesTest, TestCountLimitsTheTestSplit) {
  const StorySplit s = SplitStories(227, 100, 50);
  ASSERT_EQ(s.test.size(), 50u);
  EXPECT_EQ(s.test.front(), 100);
  EXPECT_EQ(s.test.back(), 149);
  EXPECT_TRUE(SplitStories(10, 20, 0).test.empty());
}

}  // namespace
}  // namespace entrokv::tinyllama
