#include "tinyllama/calibrate.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace entrokv::tinyllama {
namespace {

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
