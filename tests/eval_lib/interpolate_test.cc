#include "eval/lib/interpolate.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace entrokv::eval {
namespace {

using ::testing::ElementsAre;

TEST(InterpolationWeightTest, WhereTheTargetLiesBetweenTwoRuns) {
  EXPECT_DOUBLE_EQ(InterpolationWeight(20.0, 30.0, 24.0), 0.4);
  EXPECT_EQ(InterpolationWeight(20.0, 30.0, 20.0), 0.0);
  EXPECT_EQ(InterpolationWeight(20.0, 30.0, 30.0), 1.0);
}

TEST(InterpolationWeightTest, DegenerateBracketTakesItsLowerEnd) {
  EXPECT_EQ(InterpolationWeight(25.0, 25.0, 25.0), 0.0);
  EXPECT_EQ(InterpolationWeight(26.0, 25.0, 25.5), 0.0);
}

TEST(LerpTest, StraightLineBetweenTwoValues) {
  EXPECT_EQ(Lerp(1.0, 3.0, 0.25), 1.5);
  EXPECT_EQ(Lerp(4.0, 2.0, 0.5), 3.0);
  EXPECT_EQ(Lerp(7.0, 9.0, 0.0), 7.0);
}

TEST(LerpEachTest, EveryElementWithTheSameWeight) {
  // Per-story NLLs of two runs, a quarter of the way from the first.
  EXPECT_THAT(LerpEach({10.0, 20.0, 30.0}, {14.0, 16.0, 30.0}, 0.25),
              ElementsAre(11.0, 19.0, 30.0));
  // As many elements as the first.
  EXPECT_THAT(LerpEach({1.0}, {3.0, 100.0}, 0.5), ElementsAre(2.0));
}

}  // namespace
}  // namespace entrokv::eval
