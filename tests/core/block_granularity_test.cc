// Block granularity (docs/step-semantics.md section 8): only whole, full,
// unprotected blocks are evicted; ceil(need / N) of them; a block's score is
// the mean or max of its tokens' keep scores; the budget counts tokens.

#include <cstdint>

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

SessionConfig BlockConfig(Ranking ranking, int64_t budget, int32_t block_size,
                          BlockReduce reduce = BlockReduce::kMean) {
  SessionConfig config = TinyConfig(ranking, BudgetControl::kFixed, budget);
  config.block_size = block_size;
  config.block_reduce = reduce;
  return config;
}

TEST(BlockGranularityTest, EvictsCeilNeedOverBlockSizeWholeBlocks) {
  // Seven tokens, budget 4: need 3 -> ceil(3 / 2) = 2 blocks of 2, the oldest.
  TinySession session(BlockConfig(Ranking::kWindow, 4, 2));
  session.AppendZeros(0, 7);
  const StepResult result = session.StepFlat();
  EXPECT_THAT(result.evicted, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(result.live, 3);  // Tokens, below the budget by design.
  EXPECT_EQ(result.budget, 4);
}

TEST(BlockGranularityTest, NeverEvictsAPartialBlock) {
  // Blocks of 4: {0..3} full, {4, 5} partial. Budget 1 wants five out; only
  // the full block can go.
  TinySession session(BlockConfig(Ranking::kWindow, 1, 4));
  session.AppendZeros(0, 6);
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(session.Live(), ElementsAre(4, 5));
}

TEST(BlockGranularityTest, BlocksFillAcrossSteps) {
  TinySession session(BlockConfig(Ranking::kWindow, 2, 2));
  session.AppendZeros(0, 3);  // Block 0 full, block 1 holds {2}.
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(0, 1));
  session.AppendZeros(3, 1);  // Block 1 full; live 2 = budget.
  EXPECT_THAT(session.StepFlat().evicted, IsEmpty());
  session.AppendZeros(4, 1);  // Live 3: block 1 goes, block 2 is partial.
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(2, 3));
  EXPECT_THAT(session.Live(), ElementsAre(4));
}

// Key norms 1, 10 | 4, 4 | 100 (partial). Keep scores are −norm:
// mean: block 0 = −5.5, block 1 = −4 -> block 0 goes;
// max:  block 0 = −1,   block 1 = −4 -> block 1 goes.
class BlockReduceTest : public ::testing::Test {
 protected:
  static StepResult RunWith(BlockReduce reduce) {
    TinySession session(BlockConfig(Ranking::kKeyNorm, 3, 2, reduce));
    session.Append(0, 1, 0).Append(1, 0, 10);
    session.Append(2, 4, 0).Append(3, 0, 4);
    session.Append(4, 100, 0);
    return session.StepFlat();
  }
};

TEST_F(BlockReduceTest, MeanEvictsTheBlockWithTheLowestMeanScore) {
  EXPECT_THAT(RunWith(BlockReduce::kMean).evicted, ElementsAre(0, 1));
}

TEST_F(BlockReduceTest, MaxEvictsTheBlockWithTheLowestMaxScore) {
  EXPECT_THAT(RunWith(BlockReduce::kMax).evicted, ElementsAre(2, 3));
}

TEST(BlockGranularityTest, SinksAndRecentRoundUpToWholeBlocks) {
  // One sink and one recent token protect blocks 0 and 2 entirely; of the
  // two blocks needed only block 1 can go.
  SessionConfig config = BlockConfig(Ranking::kWindow, 2, 2);
  config.protection.sinks = 1;
  config.protection.recent = 1;
  TinySession session(config);
  session.AppendZeros(0, 6);
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(2, 3));
  EXPECT_THAT(session.Live(), ElementsAre(0, 1, 4, 5));
}

TEST(BlockGranularityTest, APinnedTokenProtectsItsBlock) {
  TinySession session(BlockConfig(Ranking::kWindow, 2, 2));
  session.AppendZeros(0, 1).AppendPinned(1, 0, 0).AppendZeros(2, 4);
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(2, 3, 4, 5));
  EXPECT_THAT(session.Live(), ElementsAre(0, 1));
}

TEST(BlockGranularityTest, EqualBlockScoresEvictTheOlderBlock) {
  // A flat query gives every token the same attention, so every block ties.
  TinySession session(BlockConfig(Ranking::kTova, 4, 2));
  session.AppendZeros(0, 6);
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(0, 1));
}

TEST(BlockGranularityTest, StreamingSinksKeepTheirBlockFirstInLine) {
  // Streaming with one sink: block 0 scores +inf (mean of +inf and 1), so
  // blocks 1 and 2 go before it.
  SessionConfig config = BlockConfig(Ranking::kStreaming, 2, 2);
  config.streaming_sinks = 1;
  TinySession session(config);
  session.AppendZeros(0, 6);
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(2, 3, 4, 5));
  EXPECT_THAT(session.Live(), ElementsAre(0, 1));
}

}  // namespace
}  // namespace entrokv
