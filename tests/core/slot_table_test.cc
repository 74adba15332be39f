// SlotTable's compaction against a naive model of the rule: remove the
// positions highest first, moving the last entry into each hole.

#include "slot_table.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace entrokv::internal {
namespace {

TEST(SlotTableTest, NetMovesReproduceTheSequentialCompaction) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    SlotTable table;
    const int live = 1 + static_cast<int>(rng() % 40);
    std::vector<uint64_t> naive;
    for (int i = 0; i < live; ++i) {
      table.Append(1000 + i, i % 7 == 0);
      naive.push_back(1000 + i);
    }
    std::vector<int32_t> positions;
    for (int i = 0; i < live; ++i)
      if (rng() % 3 == 0) positions.push_back(i);
    std::shuffle(positions.begin(), positions.end(), rng);
    // The naive rule, written out.
    std::vector<int32_t> sorted = positions;
    std::sort(sorted.begin(), sorted.end(), std::greater<int32_t>());
    for (int32_t pos : sorted) {
      naive[pos] = naive.back();
      naive.pop_back();
    }
    // Per-position data a backend holds, moved by the net moves.
    std::vector<uint64_t> data(live);
    for (int i = 0; i < live; ++i) data[i] = 1000 + i;
    std::vector<SlotTable::Move> moves;
    table.Remove(&positions, &moves);
    for (const SlotTable::Move& m : moves) {
      EXPECT_GE(m.src, table.live());
      EXPECT_LT(m.dst, table.live());
      data[m.dst] = data[m.src];
    }
    data.resize(table.live());
    EXPECT_EQ(table.slots(), naive);
    EXPECT_EQ(data, naive);
    EXPECT_EQ(table.live_slots().size(), naive.size());
    for (size_t p = 0; p < naive.size(); ++p) {
      EXPECT_EQ(table.indices()[p], static_cast<int64_t>(naive[p] - 1000));
      EXPECT_EQ(table.pinned()[p], (naive[p] - 1000) % 7 == 0 ? 1 : 0);
    }
  }
}

}  // namespace
}  // namespace entrokv::internal
