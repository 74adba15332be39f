#include "eval/lib/overlap.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace entrokv::eval {
namespace {

constexpr int32_t kNever = 9;

// Four entries. x evicts entry 0 at step 2 and entry 1 at step 3; y evicts
// entry 0 at step 2 and entry 2 at step 3.
const std::vector<int32_t> kX = {2, 3, kNever, kNever};
const std::vector<int32_t> kY = {2, kNever, 3, kNever};

TEST(JaccardTest, IntersectionOverUnion) {
  EXPECT_EQ(Jaccard(1, 4), 0.25);
  EXPECT_EQ(Jaccard(3, 3), 1.0);
  EXPECT_EQ(Jaccard(0, 0), 1.0);  // Both empty: they agree.
}

TEST(EvictedSetJaccardTest, SetsEverEvicted) {
  // Evicted: x {0, 1}, y {0, 2}; both {0}, either {0, 1, 2}.
  EXPECT_DOUBLE_EQ(EvictedSetJaccard(kX, kY, kNever), 1.0 / 3.0);
  EXPECT_EQ(EvictedSetJaccard(kX, kX, kNever), 1.0);
  // Nothing evicted by either.
  const std::vector<int32_t> none = {kNever, kNever};
  EXPECT_EQ(EvictedSetJaccard(none, none, kNever), 1.0);
}

TEST(EvictedSetJaccardTest, OnlyTheCommonLengthCounts) {
  // y's entry 2 lies past x's end.
  const std::vector<int32_t> x = {2, 3};
  EXPECT_EQ(EvictedSetJaccard(x, kY, kNever), 0.5);  // {0, 1} against {0}.
}

TEST(AddLiveSetJaccardsTest, LiveSetsStepByStep) {
  // Live at step t: entries p <= t with evicted_at[p] > t.
  //   t = 0: x {0},    y {0}       J = 1
  //   t = 1: x {0, 1}, y {0, 1}    J = 1
  //   t = 2: x {1, 2}, y {1, 2}    J = 1
  //   t = 3: x {2, 3}, y {1, 3}    J = 1/3
  double sum = 0.0;
  EXPECT_EQ(AddLiveSetJaccards(kX, kY, &sum), 4);
  EXPECT_DOUBLE_EQ(sum, 3.0 + 1.0 / 3.0);
}

TEST(AddLiveSetJaccardsTest, AddsToARunningSumAcrossSequences) {
  // Two sequences: the second's four terms go onto the first's.
  double sum = 0.0;
  // x evicts entry 0 at step 1; y evicts nothing (never: 64).
  const std::vector<int64_t> x = {1, 64}, y = {64, 64};
  // t = 0: x {0}, y {0}: J = 1; t = 1: x {1}, y {0, 1}: J = 1/2.
  EXPECT_EQ(AddLiveSetJaccards(x, y, &sum), 2);
  EXPECT_EQ(sum, 1.5);
  // Entry 0 evicted at its own step is never live: t = 0: {} and {}, J = 1;
  // t = 1: {1} and {1}, J = 1.
  const std::vector<int64_t> z = {0, 64};
  EXPECT_EQ(AddLiveSetJaccards(z, z, &sum), 2);
  EXPECT_EQ(sum, 3.5);
}

}  // namespace
}  // namespace entrokv::eval
