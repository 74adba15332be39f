// Needle retention (eval/sim/needles.h), on cases whose answer follows from
// the policies' rules: a window of B entries holds a needle exactly when its
// query comes fewer than B steps after it.

#include "needles.h"

#include <cstdint>

#include "entrokv/core/config.h"
#include "gtest/gtest.h"

namespace entrokv::sim {
namespace {

SessionConfig Policy(const char* name, int64_t budget) {
  SessionConfig c;
  c.shape = {.layers = 1,
             .kv_heads = 2,
             .q_heads = 4,
             .head_dim = 16,
             .element_type = ElementType::kF32};
  EXPECT_TRUE(ApplyPolicyName(name, &c).ok());
  c.budget = budget;
  c.placement = Placement::kCpu;
  return c;
}

NeedleOptions Small() {
  NeedleOptions o;
  o.entries = 1200;
  o.needles = 8;
  o.min_gap = 40;
  o.max_gap = 400;
  return o;
}

TEST(NeedleTest, AWindowHoldsExactlyTheNeedlesAskedWithinItsLength) {
  const NeedleOptions o = Small();
  // Gaps are at least 40 and at most 400: a window of 30 holds none, one of
  // 401 holds every one (a needle is asked after `gap` more appends, and a
  // window of B holds the B newest).
  auto none = RunNeedles(Policy("window", 30), o);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->retained, 0);
  auto all = RunNeedles(Policy("window", 401), o);
  ASSERT_TRUE(all.ok()) << all.status();
  // Needles are planted over the first half, so every query comes in the
  // run.
  EXPECT_EQ(all->planted, 8);
  EXPECT_EQ(all->retained, 8);
  EXPECT_EQ(all->peak_live, 401);
}

TEST(NeedleTest, EveryRankingRunsAtEqualPeakMemory) {
  const NeedleOptions o = Small();
  for (Ranking ranking : kAllRankings) {
    SessionConfig c = Policy("window", 100);
    c.ranking = ranking;
    auto r = RunNeedles(c, o);
    ASSERT_TRUE(r.ok()) << RankingName(ranking) << ": " << r.status();
    EXPECT_EQ(r->planted, 8);
    EXPECT_LE(r->retained, r->planted);
    EXPECT_EQ(r->peak_live, 100) << RankingName(ranking);
  }
}

TEST(NeedleTest, BadOptionsAreRefused) {
  NeedleOptions o = Small();
  o.max_gap = 10;
  EXPECT_FALSE(RunNeedles(Policy("window", 30), o).ok());
  SessionConfig c = Policy("window", 30);
  c.shape.element_type = ElementType::kF16;
  EXPECT_FALSE(RunNeedles(c, Small()).ok());
}

}  // namespace
}  // namespace entrokv::sim
