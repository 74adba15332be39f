// SelectEvictions' token ranking (docs/step-semantics.md section 8: the
// weakest keep scores go first, ties to the older append index, protected
// entries never) against a brute-force sort of every candidate written here.
// Needs up to 64 take a one-pass heap and larger ones a partition of every
// candidate, so both sides of that line are checked.
// SelectEvictionsOfIncreasing (rank by a, compute σ(a) only near the boundary)
// is checked against the same brute force over every σ(a).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "step_common.h"

namespace entrokv::internal {
namespace {

struct Tokens {
  std::vector<double> keep;
  std::vector<int64_t> index;
  std::vector<uint8_t> protect;
};

// `n` tokens whose scores take few distinct values (so that many tie), with
// distinct append indices in shuffled positions and about one in five
// protected.
Tokens RandomTokens(int32_t n, std::mt19937_64& rng) {
  Tokens t;
  std::vector<int64_t> order(n);
  for (int32_t i = 0; i < n; ++i) order[i] = 1000 + 3 * i;
  std::shuffle(order.begin(), order.end(), rng);
  for (int32_t p = 0; p < n; ++p) {
    t.keep.push_back(0.25 * double(rng() % 9) - 1.0);
    t.index.push_back(order[p]);
    t.protect.push_back(rng() % 5 == 0 ? 1 : 0);
  }
  return t;
}

// The positions section 8 evicts: every unprotected token sorted by (keep,
// append index), the first `need` of them, ascending by position.
std::vector<int32_t> BruteForce(const Tokens& t, int64_t need) {
  std::vector<std::tuple<double, int64_t, int32_t>> all;
  for (int32_t p = 0; p < static_cast<int32_t>(t.keep.size()); ++p) {
    if (!t.protect[p]) all.emplace_back(t.keep[p], t.index[p], p);
  }
  std::sort(all.begin(), all.end());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < need && i < static_cast<int64_t>(all.size()); ++i) {
    out.push_back(std::get<2>(all[i]));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int32_t> Select(const Tokens& t, int64_t need,
                            SelectionScratch* scratch) {
  std::vector<int32_t> evict = {-7};  // Appended to, never cleared.
  SelectEvictions({.keep = t.keep,
                   .index = t.index,
                   .protect = t.protect,
                   .next_index = 1000 + 3 * int64_t(t.keep.size()),
                   .need = need,
                   .threshold = std::nullopt},
                  scratch, &evict);
  EXPECT_EQ(evict.front(), -7);
  evict.erase(evict.begin());
  std::sort(evict.begin(), evict.end());
  return evict;
}

TEST(SelectionTest, TheWeakestUnprotectedTokensOnBothSidesOfTheHeapsLimit) {
  std::mt19937_64 rng(20261206);
  SelectionScratch scratch;  // Reused, as a session reuses it.
  for (int32_t n : {1, 2, 7, 64, 65, 300}) {
    for (int64_t need : {1, 2, 3, 16, 63, 64, 65, 66, 200, 400}) {
      for (int trial = 0; trial < 20; ++trial) {
        const Tokens t = RandomTokens(n, rng);
        ASSERT_EQ(Select(t, need, &scratch), BruteForce(t, need))
            << "n=" << n << " need=" << need << " trial=" << trial;
      }
    }
  }
}

TEST(SelectionTest, TiesGoToTheOlderAppendIndexWhateverThePosition) {
  // Equal scores everywhere: the `need` smallest append indices go, here
  // placed at the end of the positions, in reverse.
  Tokens t;
  for (int32_t p = 0; p < 100; ++p) {
    t.keep.push_back(0.5);
    t.index.push_back(1000 - p);
    t.protect.push_back(0);
  }
  SelectionScratch scratch;
  for (int64_t need : {1, 5, 64, 65, 80}) {
    std::vector<int32_t> expected;
    for (int32_t p = 100 - static_cast<int32_t>(need); p < 100; ++p) {
      expected.push_back(p);
    }
    EXPECT_EQ(Select(t, need, &scratch), expected) << "need=" << need;
  }
}

// σ, spelled out here.
double Sigma(double a) { return 1.0 / (1.0 + std::exp(-a)); }

// SelectEvictionsOfIncreasing on states `a` (scores σ(a)); nullopt when it
// declines.
std::optional<std::vector<int32_t>> SelectByState(const Tokens& a, int64_t need,
                                                  SelectionScratch* scratch) {
  std::vector<int32_t> evict = {-7};
  const bool done = SelectEvictionsOfIncreasing(
      {.keep = a.keep,
       .index = a.index,
       .protect = a.protect,
       .next_index = 1000 + 3 * int64_t(a.keep.size()),
       .need = need,
       .threshold = std::nullopt},
      Sigma, scratch, &evict);
  EXPECT_EQ(evict.front(), -7);
  evict.erase(evict.begin());
  if (!done) {
    EXPECT_TRUE(evict.empty()) << "declined after appending";
    return std::nullopt;
  }
  std::sort(evict.begin(), evict.end());
  return evict;
}

// The brute force over scores σ(a).
std::vector<int32_t> BruteForceOfSigma(const Tokens& a, int64_t need) {
  Tokens scored = a;
  for (double& v : scored.keep) v = Sigma(v);
  return BruteForce(scored, need);
}

TEST(SelectionTest, RankingByStateSelectsWhatEverySigmaWouldOrDeclines) {
  std::mt19937_64 rng(6122026);
  SelectionScratch scratch;
  std::normal_distribution<double> spread(0.0, 4.0);
  std::uniform_real_distribution<double> saturated(30.0, 45.0);
  // Regimes of states: spread out (σ strictly ordered as a); where σ rounds
  // to a few values just below 1, so distinct states tie; few distinct
  // states; and states a few units of 2^-52 apart, which σ may merge.
  enum Regime { kSpread, kSaturated, kFewValues, kUlpsApart };
  for (Regime regime : {kSpread, kSaturated, kFewValues, kUlpsApart}) {
    int selected = 0, trials = 0;
    for (int32_t n : {1, 5, 64, 65, 300, 2000}) {
      for (int64_t need : {1, 2, 17, 64}) {
        for (int trial = 0; trial < 10; ++trial) {
          Tokens t = RandomTokens(n, rng);
          for (double& v : t.keep) {
            switch (regime) {
              case kSpread:
                v = spread(rng);
                break;
              case kSaturated:
                v = saturated(rng);
                break;
              case kFewValues:
                v = 0.5 * double(rng() % 5) - 1.0;
                break;
              case kUlpsApart:
                v = 3.0 + 0x1p-51 * double(rng() % 8);
                break;
            }
          }
          const auto got = SelectByState(t, need, &scratch);
          ++trials;
          if (!got) continue;
          ++selected;
          ASSERT_EQ(*got, BruteForceOfSigma(t, need))
              << "regime " << regime << " n=" << n << " need=" << need
              << " trial=" << trial;
        }
      }
    }
    // Spread-out states must take the fast path (all 240 trials here; the
    // others took it in 70, 208 and 89 of 240 when this was written).
    if (regime == kSpread) {
      EXPECT_EQ(selected, trials);
    }
  }
}

TEST(SelectionTest, RankingByStateKeepsSigmasTieOrder) {
  // σ(40) and σ(39) both round to 1: a tie, which goes to the
  // older entry (index 1000, state 40), not to the smaller state.
  ASSERT_EQ(Sigma(40.0), Sigma(39.0));
  const Tokens t{
      .keep = {40.0, 39.0}, .index = {1000, 1003}, .protect = {0, 0}};
  SelectionScratch scratch;
  const auto got = SelectByState(t, 1, &scratch);
  if (got) {
    EXPECT_EQ(*got, std::vector<int32_t>{0});
  }
  EXPECT_EQ(BruteForceOfSigma(t, 1), std::vector<int32_t>{0});

  // Away from 1, distinct states 2^-51 apart share a σ. By state the two
  // weakest are positions 0 and 1; by σ, all three tie and the two oldest
  // (1000 and 1003) go. Whatever the strongest selected state's index is,
  // the outsider must be checked against the newest selected index.
  const double lo = 3.0, hi = 3.0 + 0x1p-51;
  ASSERT_EQ(Sigma(lo), Sigma(hi));
  const Tokens u{
      .keep = {lo, hi, hi}, .index = {1009, 1000, 1003}, .protect = {0, 0, 0}};
  EXPECT_EQ(BruteForceOfSigma(u, 2), (std::vector<int32_t>{1, 2}));
  const auto by_state = SelectByState(u, 2, &scratch);
  if (by_state) {
    EXPECT_EQ(*by_state, (std::vector<int32_t>{1, 2}));
  }
}

TEST(SelectionTest, RankingByStateDeclinesWhatItDoesNotCover) {
  SelectionScratch scratch;
  Tokens t;
  for (int32_t p = 0; p < 100; ++p) {
    t.keep.push_back(0.01 * p);
    t.index.push_back(1000 + 3 * p);
    t.protect.push_back(0);
  }
  SelectionInput in{.keep = t.keep,
                    .index = t.index,
                    .protect = t.protect,
                    .next_index = 1300,
                    .need = 65,
                    .threshold = std::nullopt};
  std::vector<int32_t> evict;
  EXPECT_FALSE(SelectEvictionsOfIncreasing(in, Sigma, &scratch, &evict));
  in.need = 3;
  in.block_size = 4;
  EXPECT_FALSE(SelectEvictionsOfIncreasing(in, Sigma, &scratch, &evict));
  in.block_size = 1;
  in.threshold = 0.5;
  EXPECT_FALSE(SelectEvictionsOfIncreasing(in, Sigma, &scratch, &evict));
  in.threshold.reset();
  t.keep[50] = std::numeric_limits<double>::quiet_NaN();
  in.keep = t.keep;
  EXPECT_FALSE(SelectEvictionsOfIncreasing(in, Sigma, &scratch, &evict));
  EXPECT_TRUE(evict.empty());
  t.keep[50] = 0.5;
  in.keep = t.keep;
  EXPECT_TRUE(SelectEvictionsOfIncreasing(in, Sigma, &scratch, &evict));
  std::sort(evict.begin(), evict.end());
  EXPECT_EQ(evict, (std::vector<int32_t>{0, 1, 2}));
}

}  // namespace
}  // namespace entrokv::internal
