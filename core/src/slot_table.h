// SlotTable: the host-side bookkeeping of a session's live entries that every
// backend shares: per position 0..live-1 the engine's slot id, the append
// index and the pinned flag, the set of live slot ids, and the compaction
// that keeps positions dense after evictions.
//
// Compaction rule (both backends): positions are removed highest first, and
// the last live entry moves into each hole. Remove() reports the net effect as
// moves (destination, source): every source is at or above the new live
// count, every destination below it, so a backend may apply them in any order
// or in parallel to its own per-position data (keys, scores, ranking state).
// Not thread-safe; owned by its session.

#ifndef ENTROKV_CORE_SRC_SLOT_TABLE_H_
#define ENTROKV_CORE_SRC_SLOT_TABLE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"

namespace entrokv::internal {

class SlotTable {
 public:
  struct Move {
    int32_t dst;
    int32_t src;
  };

  int64_t live() const { return static_cast<int64_t>(slot_.size()); }
  int64_t next_index() const { return next_index_; }
  const std::vector<uint64_t>& slots() const { return slot_; }
  const std::vector<int64_t>& indices() const { return index_; }
  const std::vector<uint8_t>& pinned() const { return pinned_; }
  const absl::flat_hash_set<uint64_t>& live_slots() const {
    return live_slots_;
  }

  // Adds an entry at position live() with the next append index.
  void Append(uint64_t slot, bool pinned) {
    slot_.push_back(slot);
    index_.push_back(next_index_++);
    pinned_.push_back(pinned ? 1 : 0);
    live_slots_.insert(slot);
  }

  // Positions 0..live-1 sorted by append index.
  std::vector<int32_t> AppendOrder() const;
  // The live slot ids in append order.
  std::vector<uint64_t> LiveSlots() const;
  // Sorts `positions` by append index (oldest first).
  void SortByAppendOrder(std::vector<int32_t>* positions) const;

  // Removes `positions` (distinct, each < live()), compacting as described
  // above; `moves` receives the net moves (cleared first). `positions` is
  // reordered.
  void Remove(std::vector<int32_t>* positions, std::vector<Move>* moves);

 private:
  std::vector<uint64_t> slot_;
  std::vector<int64_t> index_;
  std::vector<uint8_t> pinned_;
  absl::flat_hash_set<uint64_t> live_slots_;
  int64_t next_index_ = 0;
  absl::flat_hash_map<int32_t, int32_t> origin_;  // Scratch: dst -> src.
};

}  // namespace entrokv::internal

#endif  // ENTROKV_CORE_SRC_SLOT_TABLE_H_
