#include "slot_table.h"

#include <algorithm>
#include <functional>
#include <numeric>

namespace entrokv::internal {

std::vector<int32_t> SlotTable::AppendOrder() const {
  std::vector<int32_t> order(slot_.size());
  std::iota(order.begin(), order.end(), 0);
  SortByAppendOrder(&order);
  return order;
}

std::vector<uint64_t> SlotTable::LiveSlots() const {
  std::vector<uint64_t> out;
  out.reserve(slot_.size());
  for (int32_t p : AppendOrder()) out.push_back(slot_[p]);
  return out;
}

void SlotTable::SortByAppendOrder(std::vector<int32_t>* positions) const {
  std::sort(positions->begin(), positions->end(),
            [&](int32_t a, int32_t b) { return index_[a] < index_[b]; });
}

void SlotTable::Remove(std::vector<int32_t>* positions,
                       std::vector<Move>* moves) {
  // Highest position first, so each moved-in last entry is itself live.
  std::sort(positions->begin(), positions->end(), std::greater<int32_t>());
  origin_.clear();
  for (int32_t pos : *positions) {
    const int32_t last = static_cast<int32_t>(live() - 1);
    live_slots_.erase(slot_[pos]);
    if (pos != last) {
      slot_[pos] = slot_[last];
      index_[pos] = index_[last];
      pinned_[pos] = pinned_[last];
      // Where the entry now at `pos` came from before this call.
      auto it = origin_.find(last);
      const int32_t src = it == origin_.end() ? last : it->second;
      if (it != origin_.end()) origin_.erase(it);
      origin_[pos] = src;
    } else {
      origin_.erase(last);
    }
    slot_.pop_back();
    index_.pop_back();
    pinned_.pop_back();
  }
  moves->clear();
  for (const auto& [dst, src] : origin_) moves->push_back({dst, src});
}

}  // namespace entrokv::internal
