// Block summaries (docs/step-semantics.md section 10): one state per full
// block, scored from the block's mean key. Expected values by hand.

#include <cmath>
#include <cstdint>
#include <vector>

#include "core_test_util.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace entrokv::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

SessionConfig SummaryConfig(Ranking ranking, int64_t budget) {
  SessionConfig config = TinyConfig(ranking, BudgetControl::kFixed, budget);
  config.block_size = 2;
  config.block_summary = true;
  return config;
}

TEST(BlockSummaryTest, KeyNormRanksBlocksByTheirMeanKey) {
  // Blocks {1,2}: keys (3,0), (-3,0), mean (0,0), norm 0; {3,4}: mean (1,0),
  // norm 1; {5,6}: mean (2,0), norm 2. Per-token norms would call {1,2} the
  // largest (3); the summary evicts {5,6}, the largest mean-key norm.
  TinySession s(SummaryConfig(Ranking::kKeyNorm, /*budget=*/4));
  s.Append(1, 3, 0).Append(2, -3, 0).Append(3, 1, 0).Append(4, 1, 0);
  s.Append(5, 2, 0).Append(6, 2, 0);
  const StepResult r = s.StepFlat();
  EXPECT_THAT(r.evicted, ElementsAre(5, 6));
  EXPECT_EQ(r.live, 4);
  EXPECT_EQ(r.budget, 4);
  EXPECT_THAT(s.Live(), ElementsAre(1, 2, 3, 4));
}

TEST(BlockSummaryTest, MeanLogitOfABlockIsTheMeanOfItsTokensLogits) {
  TinySession s(SummaryConfig(Ranking::kAffinity, 8));
  s.Append(1, 1, 2).Append(2, 3, -4);
  s.Step(0.5f, 1.0f, /*entropy=*/1.0);
  // Tokens' logits with x·k0 + y·k1: 0.5 + 2 = 2.5 and 1.5 - 4 = -2.5;
  // mean 0. The block's mean key (2, -1) gives 1 - 1 = 0 as well.
  EXPECT_NEAR(s.trace().mean_logit.at(s.TraceIndex(1)), 0.0f, 1e-6);
  s.Append(3, 2, 2).Append(4, 0, 2);
  s.Step(1.0f, 0.5f, 1.0);
  // Mean key (1, 2): 1·1 + 0.5·2 = 2.
  EXPECT_NEAR(s.trace().mean_logit.at(s.TraceIndex(3)), 2.0f, 1e-6);
  EXPECT_NEAR(s.trace().mean_logit.at(s.TraceIndex(4)), 2.0f, 1e-6);
}

TEST(BlockSummaryTest, PartialBlockIsHeldAndNeverEvicted) {
  TinySession s(SummaryConfig(Ranking::kWindow, 4));
  s.AppendZeros(1, 5);
  StepResult r = s.StepFlat();
  // Two full blocks fit the budget of 2 blocks; token 5 waits for its pair.
  EXPECT_THAT(r.evicted, IsEmpty());
  EXPECT_EQ(r.live, 5);
  s.AppendZeros(6, 1);
  r = s.StepFlat();
  // Block {5,6} is full: 3 blocks for 2, the oldest block goes whole.
  EXPECT_THAT(r.evicted, ElementsAre(1, 2));
  EXPECT_EQ(r.live, 4);
  const SessionStats stats = s.session().Stats();
  EXPECT_EQ(stats.appended, 6);
  EXPECT_EQ(stats.evicted, 2);
  // Two block summaries held, each one entry of 8 key bytes + 40.
  EXPECT_EQ(stats.bytes_held, 2 * 48);
}

TEST(BlockSummaryTest, PinnedTokenPinsItsBlock) {
  TinySession s(SummaryConfig(Ranking::kWindow, 2));
  s.Append(1, 0, 0).AppendPinned(2, 0, 0).AppendZeros(3, 4);
  const StepResult r = s.StepFlat();
  // Three blocks for one: {1,2} is pinned, so {3,4} and {5,6} go.
  EXPECT_THAT(r.evicted, ElementsAre(3, 4, 5, 6));
}

TEST(BlockSummaryTest, SinksAndRecentAreRoundedUpToBlocks) {
  SessionConfig config = SummaryConfig(Ranking::kWindow, 2);
  config.protection.sinks = 1;   // -> block 0.
  config.protection.recent = 3;  // -> the 2 newest blocks.
  TinySession s(config);
  s.AppendZeros(1, 8);
  const StepResult r = s.StepFlat();
  // Blocks {1,2} (sink), {3,4}, {5,6} (recent), {7,8} (recent): only {3,4}
  // is a candidate.
  EXPECT_THAT(r.evicted, ElementsAre(3, 4));
}

TEST(BlockSummaryTest, ConfigNeedsBlocks) {
  SessionConfig config = SummaryConfig(Ranking::kWindow, 4);
  config.block_size = 1;
  EXPECT_THAT(std::string(ValidateSessionConfig(config).message()),
              ::testing::HasSubstr("block_summary"));
}

TEST(BlockSummaryTest, ComposesWithCadence) {
  SessionConfig config = SummaryConfig(Ranking::kWindow, 2);
  config.decide_every = 2;
  auto backend = std::move(CreateBackend(BackendKind::kCpu)).value();
  auto session = std::move(backend->CreateSession(config, {})).value();
  StepResult r;
  StepBuilder a(config.shape);
  a.Append(1, {0, 0}).Append(2, {0, 0}).Append(3, {0, 0});
  ASSERT_TRUE(session->Step(a.Build(5), &r).ok());
  EXPECT_THAT(r.evicted, IsEmpty());
  StepBuilder b(config.shape);
  b.Append(4, {0, 0}).Append(5, {0, 0}).Query({0, 0});
  ASSERT_TRUE(session->Step(b.Build(6), &r).ok());
  // Blocks {1,2}, {3,4} for a budget of one block; 5 is partial.
  EXPECT_THAT(r.evicted, ElementsAre(1, 2));
  EXPECT_THAT(session->LiveSlots(), ElementsAre(3, 4, 5));
  EXPECT_EQ(session->Stats().steps, 2);
}

}  // namespace
}  // namespace entrokv::testing
