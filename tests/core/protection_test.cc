// Protection (docs/step-semantics.md section 7): pinned entries, the first
// `sinks` entries and the `recent` newest are never evicted, by any ranking,
// even when that leaves the session over its budget.

#include <cstdint>
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core_test_util.h"
#include "entrokv/core/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace entrokv {
namespace {

using ::entrokv::testing::TinyConfig;
using ::entrokv::testing::TinySession;
using ::testing::ElementsAre;

TEST(ProtectionTest, PinnedEntriesAreNeverEvicted) {
  TinySession session(TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 2));
  session.AppendPinned(0, 0, 0).AppendZeros(1, 3);
  const StepResult result = session.StepFlat();
  EXPECT_THAT(result.evicted, ElementsAre(1, 2));
  EXPECT_THAT(session.Live(), ElementsAre(0, 3));
  EXPECT_THAT(session.trace().protected_, ElementsAre(1, 0, 0, 0));
}

TEST(ProtectionTest, ProtectedEntriesMayHoldTheSessionOverBudget) {
  TinySession session(TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 1));
  session.AppendPinned(0, 0, 0).AppendPinned(1, 0, 0).AppendPinned(2, 0, 0);
  session.AppendZeros(3, 1);
  const StepResult result = session.StepFlat();
  EXPECT_THAT(result.evicted, ElementsAre(3));
  EXPECT_EQ(result.live, 3);
  EXPECT_EQ(result.budget, 1);
}

TEST(ProtectionTest, SinksAreNeverEvicted) {
  SessionConfig config = TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 2);
  config.protection.sinks = 2;
  TinySession session(config);
  session.AppendZeros(0, 5);
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(2, 3, 4));
  EXPECT_THAT(session.trace().protected_, ElementsAre(1, 1, 0, 0, 0));

  session.AppendZeros(5, 1);
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(5));
  EXPECT_THAT(session.Live(), ElementsAre(0, 1));
}

TEST(ProtectionTest, RecentEntriesAreNeverEvictedEvenWithTheLowestScores) {
  SessionConfig config = TinyConfig(Ranking::kTova, BudgetControl::kFixed, 3);
  config.protection.recent = 2;
  TinySession session(config);
  // Logits 1, 2, 3, −5, −6: TOVA alone would evict the last two.
  session.Append(0, 1, 0).Append(1, 2, 0).Append(2, 3, 0).Append(3, -5, 0);
  session.Append(4, -6, 0);
  EXPECT_THAT(session.Step(1.0f, 0.0f).evicted, ElementsAre(0, 1));
  EXPECT_THAT(session.trace().protected_, ElementsAre(0, 0, 0, 1, 1));

  // The window moves with the appends: 3 and 4 are no longer recent.
  session.Append(5, 0, 0).Append(6, 0, 0);
  EXPECT_THAT(session.Step(1.0f, 0.0f).evicted, ElementsAre(3, 4));
  EXPECT_THAT(session.Live(), ElementsAre(2, 5, 6));
}

TEST(ProtectionTest, AnEvictedSlotIdMayBeReused) {
  TinySession session(TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 1));
  session.AppendZeros(7, 2);
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(7));
  session.AppendZeros(7, 1);  // Slot 7 is free again; it is a new entry.
  EXPECT_THAT(session.StepFlat().evicted, ElementsAre(8));
  EXPECT_THAT(session.Live(), ElementsAre(7));
}

// Every ranking and every controller respect every kind of protection.
class ProtectionAcrossRankingsTest
    : public ::testing::TestWithParam<std::pair<Ranking, BudgetControl>> {};

TEST_P(ProtectionAcrossRankingsTest, NeverEvictsPinnedSinksOrRecent) {
  const auto [ranking, control] = GetParam();
  SessionConfig config = TinyConfig(ranking, control, /*budget=*/6);
  config.protection.sinks = 2;
  config.protection.recent = 3;
  config.streaming_sinks = 1;
  config.seed = 3;
  TinySession session(config);

  std::set<uint64_t> pinned;
  uint64_t slot = 0;
  uint32_t lcg = 12345;
  auto next_float = [&lcg] {
    lcg = lcg * 1664525u + 1013904223u;
    return static_cast<float>(lcg >> 8) / float(1 << 24) * 4.0f - 2.0f;
  };
  for (int step = 0; step < 60; ++step) {
    const int appends = step % 3 == 0 ? 3 : 1;
    for (int i = 0; i < appends; ++i, ++slot) {
      const bool pin = slot % 11 == 5;
      if (pin) pinned.insert(slot);
      session.Append(slot, next_float(), next_float(), pin);
    }
    const double entropy = 1.0 + 0.5 * std::sin(step * 0.7);
    const StepResult result =
        session.Step(next_float(), next_float(), entropy);
    for (uint64_t evicted : result.evicted) {
      EXPECT_FALSE(pinned.count(evicted)) << "pinned " << evicted;
      EXPECT_GE(evicted, 2u) << "a sink";
      EXPECT_LT(evicted + 3, slot) << "a recent entry " << evicted;
    }
    // Over budget only as far as protection forces it.
    const int64_t unprotected_live = [&] {
      int64_t n = 0;
      for (uint8_t p : session.trace().protected_) n += p == 0;
      return n - static_cast<int64_t>(result.evicted.size());
    }();
    if (result.live > result.budget) {
      EXPECT_EQ(unprotected_live, 0) << "step " << step;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllPolicies, ProtectionAcrossRankingsTest,
    ::testing::ValuesIn(AllPolicies()),
    [](const auto& info) {
      return std::string(RankingName(std::get<0>(info.param))) + "_" +
             std::string(BudgetControlName(std::get<1>(info.param)));
    });

}  // namespace
}  // namespace entrokv
