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

TEST(SpearmanRhoTest, WithoutTiesIsOneMinusSixSumOfSquaredRankGaps) {
  // Ranks 1..5 against 2,1,4,3,5: Σd² = 4, ρ = 1 − 6·4 / (5·24) = 0.8.
  EXPECT_NEAR(SpearmanRho({10, 20, 30, 40, 50}, {0.2, 0.1, 0.4, 0.3, 0.5}),
              0.8, 1e-12);
  EXPECT_NEAR(SpearmanRho({1, 2, 3}, {-1, -2, -3}), -1.0, 1e-12);
}

TEST(SpearmanRhoTest, TiesTakeTheMeanRankByHand) {
  // y's ranks: 1, 2, 3.5, 5, 3.5. Centred on 3: x −2,−1,0,1,2 and
  // y −2,−1,0.5,2,0.5; Σxy = 8, Σx² = 10, Σy² = 9.5: ρ = 8 / √95.
  EXPECT_NEAR(SpearmanRho({1, 2, 3, 4, 5}, {5, 6, 7, 8, 7}),
              8.0 / std::sqrt(95.0), 1e-12);
}

TEST(SpearmanRhoTest, UndefinedCasesAreNaN) {
  EXPECT_TRUE(std::isnan(SpearmanRho({1, 2, 3}, {4, 4, 4})));
  EXPECT_TRUE(std::isnan(SpearmanRho({1}, {2})));
  EXPECT_TRUE(std::isnan(SpearmanRho({1, 2}, {1, 2, 3})));
  EXPECT_TRUE(std::isnan(SpearmanRho({1, std::nan(""), 3}, {1, 2, 3})));
}

// A run whose every story has NLL `nll` over 10 tokens and measure `m`.
RankedRun Flat(int group, double nll, double m, int stories) {
  RankedRun run;
  run.group = group;
  run.nll.assign(stories, nll);
  run.tokens.assign(stories, 10);
  run.num.assign(stories, m);
  run.den.assign(stories, 1.0);
  return run;
}

TEST(RankAgreementTest, PooledAndWithinByHand) {
  // Within each target the higher measure has the lower perplexity; across
  // targets the measure is higher where perplexity is too. Pooled ranks:
  // measure B1 A2 D3 C4, −ppl D1 C2 B3 A4: gaps −2,−2,2,2, Σd² = 16,
  // ρ = 1 − 6·16 / (4·15) = −0.6. Within: +1 in both groups. Every story
  // is alike, so every resample gives the same ρ.
  const std::vector<RankedRun> runs = {
      Flat(0, 10.0, 0.2, 4),   // A
      Flat(0, 20.0, 0.1, 4),   // B
      Flat(1, 30.0, 0.9, 4),   // C
      Flat(1, 40.0, 0.8, 4)};  // D
  const MeasureAgreement a = RankAgreementBootstrap(runs, 200, 5, 0.95);
  EXPECT_NEAR(a.pooled.rho, -0.6, 1e-12);
  EXPECT_NEAR(a.pooled.lo, -0.6, 1e-12);
  EXPECT_NEAR(a.pooled.hi, -0.6, 1e-12);
  EXPECT_NEAR(a.within.rho, 1.0, 1e-12);
  EXPECT_NEAR(a.within.lo, 1.0, 1e-12);
  EXPECT_EQ(a.groups, 2);
}

TEST(RankAgreementTest, MeasureAndPerplexityComeFromTheSameResample) {
  // Two stories: in story 1 run A is better on both counts, in story 2 run
  // B is. Pooled over both, A wins perplexity (NLL 1+9 < 5+6) but B has the
  // higher measure ((0.2+0.9)/2 > (0.8+0.1)/2): ρ = −1. A resample of
  // story 1 twice (p 1/4) gives +1, of story 2 twice +1 too; both stories
  // (p 1/2) −1. So the 95% interval runs from −1 to +1, and a draw that
  // paired one story's NLL with the other's measure could not give +1.
  RankedRun a, b;
  a.nll = {1.0, 9.0};
  b.nll = {5.0, 6.0};
  a.tokens = b.tokens = {10, 10};
  a.num = {0.8, 0.1};
  b.num = {0.2, 0.9};
  a.den = b.den = {1.0, 1.0};
  const MeasureAgreement m = RankAgreementBootstrap({a, b}, 2000, 11, 0.95);
  EXPECT_NEAR(m.pooled.rho, -1.0, 1e-12);
  EXPECT_NEAR(m.pooled.lo, -1.0, 1e-12);
  EXPECT_NEAR(m.pooled.hi, 1.0, 1e-12);
  const MeasureAgreement again =
      RankAgreementBootstrap({a, b}, 2000, 11, 0.95);
  EXPECT_EQ(again.pooled.lo, m.pooled.lo);
  EXPECT_EQ(again.pooled.hi, m.pooled.hi);
}

}  // namespace
}  // namespace entrokv::tinyllama
