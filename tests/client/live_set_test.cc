// LiveSet: the client's record of live entries and its local streaming
// decision. Expected evictions are worked out by hand in each test.

#include "entrokv/client/live_set.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class LiveSetTest : public ::testing::Test {
 protected:
  // Appends slots first, first+1, ... (count of them), one step each.
  void AppendRange(uint64_t first, int count) {
    for (int i = 0; i < count; ++i) {
      const uint64_t id = first + i;
      ASSERT_OK(live_.CheckAppend({&id, 1}, {}));
      live_.Append({&id, 1}, {});
    }
  }

  LiveSet live_;
};

TEST_F(LiveSetTest, WithinBudgetEvictsNothing) {
  AppendRange(10, 4);
  EXPECT_THAT(live_.StreamingEvictions({.budget = 4}), IsEmpty());
}

TEST_F(LiveSetTest, EvictsOldestAfterTheSinks) {
  AppendRange(10, 8);  // Append indices 0..7 = slots 10..17.
  // Budget 5, sinks 2: keep indices 0, 1 and the newest three (5, 6, 7).
  EXPECT_THAT(live_.StreamingEvictions({.budget = 5, .sinks = 2}),
              ElementsAre(12, 13, 14));
}

TEST_F(LiveSetTest, NeverEvictsPinnedOrRecentEntries) {
  const std::vector<uint64_t> ids = {1, 2, 3, 4, 5, 6};
  const std::vector<uint8_t> pinned = {0, 1, 0, 0, 0, 0};
  ASSERT_OK(live_.CheckAppend(ids, pinned));
  live_.Append(ids, pinned);
  // Budget 2, recent 3: slots 4, 5, 6 are recent and 2 pinned; only 1 and 3
  // may go, and protected entries keep the live count above the budget.
  EXPECT_THAT(live_.StreamingEvictions({.budget = 2, .recent = 3}),
              ElementsAre(1, 3));
}

TEST_F(LiveSetTest, RemovedEntriesAreForgotten) {
  AppendRange(10, 6);
  const std::vector<uint64_t> gone = {11, 12, 99};
  EXPECT_EQ(live_.Remove(gone), 2);
  EXPECT_EQ(live_.size(), 4);
  EXPECT_THAT(live_.Slots(), ElementsAre(10, 13, 14, 15));
  // A removed id may be appended again; it is then the newest entry.
  const uint64_t again = 11;
  ASSERT_OK(live_.CheckAppend({&again, 1}, {}));
  live_.Append({&again, 1}, {});
  EXPECT_THAT(live_.StreamingEvictions({.budget = 3}), ElementsAre(10, 13));
}

TEST_F(LiveSetTest, EntriesListLiveSlotsWithTheirPinnedFlagsInAppendOrder) {
  const std::vector<uint64_t> ids = {7, 3, 9, 1};
  const std::vector<uint8_t> pinned = {0, 1, 0, 1};
  live_.Append(ids, pinned);
  const uint64_t late = 5;
  live_.Append({&late, 1}, {});
  const std::vector<uint64_t> gone = {9};
  live_.Remove(gone);
  std::vector<uint64_t> slots = {42};
  std::vector<uint8_t> flags = {42};
  live_.Entries(&slots, &flags);
  EXPECT_THAT(slots, ElementsAre(7, 3, 1, 5));
  EXPECT_THAT(flags, ElementsAre(0, 1, 1, 0));
}

TEST_F(LiveSetTest, BlocksAreEvictedWholeAndOnlyWhenFull) {
  AppendRange(100, 10);  // Blocks of 4: [100..103] [104..107] [108, 109].
  // Budget 5 (need 5): sinks 1 protects block 0, so block 1 then block 2...
  // but block 2 is not full. Only block 1 goes (live 6 > 5: best effort).
  EXPECT_THAT(
      live_.StreamingEvictions({.budget = 5, .sinks = 1, .block_size = 4}),
      ElementsAre(104, 105, 106, 107));
  // Without sinks, ceil(5 / 4) = 2 blocks: 0 and 1.
  EXPECT_THAT(live_.StreamingEvictions({.budget = 5, .block_size = 4}),
              ElementsAre(100, 101, 102, 103, 104, 105, 106, 107));
}

TEST_F(LiveSetTest, BlockWithAnEvictedTokenIsNoCandidate) {
  AppendRange(100, 12);
  const uint64_t gone = 101;
  live_.Remove({&gone, 1});
  // Block 0 lost a token (the server evicts blocks whole, so this only
  // happens after a token-level decision); block 1 is the oldest whole one.
  EXPECT_THAT(live_.StreamingEvictions({.budget = 8, .block_size = 4}),
              ElementsAre(104, 105, 106, 107));
}

TEST_F(LiveSetTest, RejectsDuplicateAndMismatchedAppends) {
  AppendRange(7, 1);
  const std::vector<uint64_t> live_again = {7};
  EXPECT_STATUS_CODE(live_.CheckAppend(live_again, {}),
                     absl::StatusCode::kInvalidArgument);
  const std::vector<uint64_t> twice = {8, 8};
  EXPECT_STATUS_CODE(live_.CheckAppend(twice, {}),
                     absl::StatusCode::kInvalidArgument);
  const std::vector<uint64_t> two = {8, 9};
  const std::vector<uint8_t> one_flag = {1};
  EXPECT_STATUS_CODE(live_.CheckAppend(two, one_flag),
                     absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(live_.size(), 1);
}

}  // namespace
}  // namespace entrokv
