#include "tinyllama/kv_cache.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"

namespace entrokv::tinyllama {

KvCache::KvCache(int layers, int kv_dim, int capacity)
    : layers_(layers),
      kv_dim_(kv_dim),
      capacity_(capacity),
      keys_(static_cast<size_t>(capacity) * layers * kv_dim),
      values_(keys_.size()),
      positions_(capacity, -1) {
  live_.reserve(capacity);
}

absl::StatusOr<int> KvCache::Append(int position) {
  // The lowest free slot: deterministic, and freed slots are reused.
  auto free = std::find(positions_.begin(), positions_.end(), -1);
  if (free == positions_.end()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: all ", capacity_, " slots are live"));
  }
  const int slot = static_cast<int>(free - positions_.begin());
  positions_[slot] = position;
  live_.push_back(slot);
  peak_live_ = std::max(peak_live_, live_count());
  return slot;
}

absl::Status KvCache::Evict(uint64_t slot) {
  if (slot >= static_cast<uint64_t>(capacity_) || positions_[slot] < 0) {
    return absl::NotFoundError(
        absl::StrCat("kv cache: slot ", slot, " is not live"));
  }
  positions_[slot] = -1;
  live_.erase(std::find(live_.begin(), live_.end(), static_cast<int>(slot)));
  return absl::OkStatus();
}

void KvCache::Clear() {
  std::fill(positions_.begin(), positions_.end(), -1);
  live_.clear();
  peak_live_ = 0;
}

absl::Span<float> KvCache::Key(int layer, int slot) {
  assert(positions_[slot] >= 0);
  return absl::MakeSpan(keys_.data() + Offset(layer, slot), kv_dim_);
}
absl::Span<float> KvCache::Value(int layer, int slot) {
  assert(positions_[slot] >= 0);
  return absl::MakeSpan(values_.data() + Offset(layer, slot), kv_dim_);
}
absl::Span<const float> KvCache::Key(int layer, int slot) const {
  assert(positions_[slot] >= 0);
  return absl::MakeConstSpan(keys_.data() + Offset(layer, slot), kv_dim_);
}
absl::Span<const float> KvCache::Value(int layer, int slot) const {
  assert(positions_[slot] >= 0);
  return absl::MakeConstSpan(values_.data() + Offset(layer, slot), kv_dim_);
}

}  // namespace entrokv::tinyllama
