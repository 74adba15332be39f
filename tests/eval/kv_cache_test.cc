// KvCache: slots are really freed and reused, attention order is append order.

#include "tinyllama/kv_cache.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace entrokv::tinyllama {
namespace {

using ::testing::ElementsAre;

class KvCacheTest : public ::testing::Test {
 protected:
  // Appends tokens at positions first..first+n-1 and returns their slots.
  std::vector<int> AppendTokens(int first, int n) {
    std::vector<int> slots;
    for (int p = first; p < first + n; ++p) {
      auto slot = cache_.Append(p);
      EXPECT_OK(slot);
      if (slot.ok()) slots.push_back(*slot);
    }
    return slots;
  }

  KvCache cache_{/*layers=*/2, /*kv_dim=*/3, /*capacity=*/4};
};

TEST_F(KvCacheTest, TakesLowestFreeSlotsInOrder) {
  EXPECT_THAT(AppendTokens(0, 3), ElementsAre(0, 1, 2));
  EXPECT_THAT(cache_.live(), ElementsAre(0, 1, 2));
  EXPECT_EQ(cache_.position(2), 2);
}

TEST_F(KvCacheTest, EvictedSlotIsReusedAndKeepsAppendOrder) {
  AppendTokens(0, 3);
  ASSERT_OK(cache_.Evict(1));
  EXPECT_THAT(cache_.live(), ElementsAre(0, 2));
  // Position 3 reuses slot 1, but attends after slot 2 (append order).
  EXPECT_THAT(AppendTokens(3, 1), ElementsAre(1));
  EXPECT_THAT(cache_.live(), ElementsAre(0, 2, 1));
  EXPECT_EQ(cache_.position(1), 3);
  EXPECT_EQ(cache_.peak_live(), 3);
}

TEST_F(KvCacheTest, KeysAndValuesArePerLayerAndSlot) {
  AppendTokens(0, 2);
  cache_.Key(1, 1)[2] = 5.0f;
  cache_.Value(0, 1)[0] = 7.0f;
  EXPECT_EQ(cache_.Key(1, 1)[2], 5.0f);
  EXPECT_EQ(cache_.Value(0, 1)[0], 7.0f);
  EXPECT_NE(cache_.Key(0, 1).data(), cache_.Key(1, 1).data());
  EXPECT_NE(cache_.Key(1, 0).data(), cache_.Key(1, 1).data());
}

TEST_F(KvCacheTest, RejectsDoubleFreeAndUnknownSlot) {
  AppendTokens(0, 2);
  ASSERT_OK(cache_.Evict(0));
  EXPECT_STATUS_CODE(cache_.Evict(0), absl::StatusCode::kNotFound);
  EXPECT_STATUS_CODE(cache_.Evict(3), absl::StatusCode::kNotFound);
  EXPECT_STATUS_CODE(cache_.Evict(uint64_t{1} << 40),
                     absl::StatusCode::kNotFound);
  EXPECT_THAT(cache_.live(), ElementsAre(1));
}

TEST_F(KvCacheTest, FullCacheIsResourceExhausted) {
  AppendTokens(0, 4);
  EXPECT_STATUS_CODE(cache_.Append(4), absl::StatusCode::kResourceExhausted);
  cache_.Clear();
  EXPECT_EQ(cache_.live_count(), 0);
  EXPECT_THAT(AppendTokens(0, 1), ElementsAre(0));
}

}  // namespace
}  // namespace entrokv::tinyllama
