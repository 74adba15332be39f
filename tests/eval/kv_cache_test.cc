// KvCache: slots are really freed and reused, attention order is append order;
// the host tier moves an entry's keys and values bit for bit.

#include "tinyllama/kv_cache.h"

#include <cmath>
#include <cstring>
#include <limits>
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

// A cache of 2 layers × 3 floats, 4 device rows and 2 host rows.
class KvCacheTierTest : public ::testing::Test {
 protected:
  // A distinct pattern per (slot tag, layer, column, K or V), with values
  // that a lossy copy would change: −0, a subnormal, a NaN with a payload.
  static float Pattern(int tag, int layer, int col, bool value) {
    switch ((tag + layer + col) % 4) {
      case 0:
        return -0.0f;
      case 1:
        return std::numeric_limits<float>::denorm_min() * (tag + 1);
      case 2: {
        uint32_t bits = 0x7fc00000u | static_cast<uint32_t>(tag * 16 + col);
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return f;
      }
      default:
        return (value ? -1.0f : 1.0f) *
               (1.0f + tag / 7.0f + layer / 3.0f + col / 11.0f);
    }
  }

  int AppendWith(int position, int tag) {
    absl::StatusOr<int> slot = cache_.Append(position);
    EXPECT_OK(slot);
    for (int l = 0; l < 2; ++l) {
      for (int c = 0; c < 3; ++c) {
        cache_.Key(l, *slot)[c] = Pattern(tag, l, c, false);
        cache_.Value(l, *slot)[c] = Pattern(tag, l, c, true);
      }
    }
    return *slot;
  }

  // Every float of `slot`'s keys and values has the bits AppendWith wrote.
  void ExpectPattern(int slot, int tag) {
    for (int l = 0; l < 2; ++l) {
      for (int c = 0; c < 3; ++c) {
        const float k = Pattern(tag, l, c, false);
        const float v = Pattern(tag, l, c, true);
        EXPECT_EQ(std::memcmp(&cache_.Key(l, slot)[c], &k, sizeof k), 0)
            << "key layer " << l << " col " << c;
        EXPECT_EQ(std::memcmp(&cache_.Value(l, slot)[c], &v, sizeof v), 0)
            << "value layer " << l << " col " << c;
      }
    }
  }

  KvCache cache_{/*layers=*/2, /*kv_dim=*/3, /*capacity=*/4,
                 /*host_capacity=*/2};
};

TEST_F(KvCacheTierTest, DemotedThenPromotedEntryIsBitIdentical) {
  AppendWith(0, 0);
  AppendWith(1, 1);
  AppendWith(2, 2);
  ASSERT_OK(cache_.Demote(1));
  EXPECT_THAT(cache_.live(), ElementsAre(0, 2));
  EXPECT_TRUE(cache_.is_demoted(1));
  EXPECT_EQ(cache_.demoted_count(), 1);
  // The freed device row 1 goes to the next token; id 1 stays reserved.
  EXPECT_EQ(AppendWith(3, 3), 3);
  EXPECT_EQ(cache_.device_row(3), 1);
  EXPECT_EQ(AppendWith(4, 4), 4);  // Device row 3, the last one.
  EXPECT_STATUS_CODE(cache_.Append(5), absl::StatusCode::kResourceExhausted);
  ASSERT_OK(cache_.Evict(0));  // Frees device row 0.
  ASSERT_OK(cache_.Promote(1));
  EXPECT_EQ(cache_.device_row(1), 0);  // Not the row it left.
  ExpectPattern(1, 1);
  ExpectPattern(3, 3);  // The row it left, rewritten by position 3.
  // Back among the live entries in position order.
  EXPECT_THAT(cache_.live(), ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(cache_.demoted_count(), 0);
}

TEST_F(KvCacheTierTest, CountsTheBytesEachMoveCopies) {
  AppendWith(0, 0);
  AppendWith(1, 1);
  ASSERT_OK(cache_.Demote(0));
  ASSERT_OK(cache_.Demote(1));
  ASSERT_OK(cache_.Promote(0));
  // K and V × 2 layers × 3 floats × 4 bytes = 48 bytes an entry; 3 moves.
  EXPECT_EQ(cache_.entry_bytes(), 48);
  EXPECT_EQ(cache_.demotions(), 2);
  EXPECT_EQ(cache_.promotions(), 1);
  EXPECT_EQ(cache_.bytes_moved(), 144);
  // Evicting does not move anything.
  ASSERT_OK(cache_.Evict(1));
  ASSERT_OK(cache_.Evict(0));
  EXPECT_EQ(cache_.bytes_moved(), 144);
}

TEST_F(KvCacheTierTest, EvictingADemotedEntryFreesItsIdAndHostRow) {
  AppendWith(0, 0);
  AppendWith(1, 1);
  ASSERT_OK(cache_.Demote(0));
  ASSERT_OK(cache_.Demote(1));
  EXPECT_STATUS_CODE(cache_.Demote(2), absl::StatusCode::kNotFound);
  ASSERT_OK(cache_.Evict(0));
  EXPECT_EQ(cache_.demoted_count(), 1);
  EXPECT_EQ(cache_.position(0), -1);
  EXPECT_EQ(AppendWith(7, 7), 0);  // Id 0 is free again.
  ASSERT_OK(cache_.Demote(0));     // Into the host row id 0 had.
  ASSERT_OK(cache_.Promote(1));
  ExpectPattern(1, 1);
  EXPECT_THAT(cache_.live(), ElementsAre(1));
}

TEST_F(KvCacheTierTest, FailOpenHandBackFreesDemotedAndLiveEntriesAlike) {
  // The client library's fail-open (client/include/entrokv/client/
  // session.h, "Demote tier"): the first locally decided step evicts every
  // demoted entry, merged in append order with the local rule's own
  // evictions of live entries.
  for (int t = 0; t < 4; ++t) AppendWith(t, t);
  ASSERT_OK(cache_.Demote(0));
  ASSERT_OK(cache_.Demote(2));
  for (uint64_t slot : {0, 1, 2}) ASSERT_OK(cache_.Evict(slot));
  EXPECT_EQ(cache_.demoted_count(), 0);
  EXPECT_THAT(cache_.live(), ElementsAre(3));
  ExpectPattern(3, 3);
  // Both host rows are free again, and so are the three ids.
  EXPECT_EQ(AppendWith(4, 4), 0);
  EXPECT_EQ(AppendWith(5, 5), 1);
  ASSERT_OK(cache_.Demote(0));
  ASSERT_OK(cache_.Demote(1));
  EXPECT_EQ(AppendWith(6, 6), 2);
  EXPECT_THAT(cache_.live(), ElementsAre(3, 2));
}

TEST_F(KvCacheTierTest, RejectsMovesOfEntriesNotThereAndAFullHost) {
  AppendWith(0, 0);
  AppendWith(1, 1);
  AppendWith(2, 2);
  EXPECT_STATUS_CODE(cache_.Promote(0), absl::StatusCode::kNotFound);
  EXPECT_STATUS_CODE(cache_.Demote(5), absl::StatusCode::kNotFound);
  EXPECT_STATUS_CODE(cache_.Demote(uint64_t{1} << 40),
                     absl::StatusCode::kNotFound);
  ASSERT_OK(cache_.Demote(0));
  EXPECT_STATUS_CODE(cache_.Demote(0), absl::StatusCode::kNotFound);
  ASSERT_OK(cache_.Demote(1));
  EXPECT_STATUS_CODE(cache_.Demote(2), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(cache_.live(), ElementsAre(2));
  EXPECT_EQ(cache_.demotions(), 2);
  // A cache without a host tier demotes nothing.
  KvCache plain(2, 3, 4);
  ASSERT_OK(plain.Append(0).status());
  EXPECT_STATUS_CODE(plain.Demote(0), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace entrokv::tinyllama
