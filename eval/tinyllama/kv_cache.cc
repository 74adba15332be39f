#include "tinyllama/kv_cache.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"

namespace entrokv::tinyllama {

KvCache::KvCache(int layers, int kv_dim, int capacity, int host_capacity)
    : layers_(layers),
      kv_dim_(kv_dim),
      capacity_(capacity),
      host_capacity_(host_capacity),
      keys_(static_cast<size_t>(capacity) * layers * kv_dim),
      values_(keys_.size()),
      host_keys_(static_cast<size_t>(host_capacity) * layers * kv_dim),
      host_values_(host_keys_.size()),
      positions_(capacity + host_capacity, -1),
      device_row_(positions_.size(), -1),
      host_row_(positions_.size(), -1),
      device_used_(capacity, 0),
      host_used_(host_capacity, 0) {
  live_.reserve(capacity);
}

absl::StatusOr<int> KvCache::Append(int position) {
  // The lowest free row and id: deterministic, and freed ones are reused.
  // Every free row leaves a free id (ids outnumber device rows by the host
  // rows, and a demoted entry holds one host row).
  auto row = std::find(device_used_.begin(), device_used_.end(), 0);
  if (row == device_used_.end()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: all ", capacity_, " device rows are live"));
  }
  auto id = std::find(positions_.begin(), positions_.end(), -1);
  assert(id != positions_.end());
  const int slot = static_cast<int>(id - positions_.begin());
  *row = 1;
  positions_[slot] = position;
  device_row_[slot] = static_cast<int>(row - device_used_.begin());
  live_.push_back(slot);
  peak_live_ = std::max(peak_live_, live_count());
  return slot;
}

absl::Status KvCache::Evict(uint64_t slot) {
  if (!Valid(slot) || positions_[slot] < 0) {
    return absl::NotFoundError(
        absl::StrCat("kv cache: slot ", slot, " is not held"));
  }
  if (device_row_[slot] >= 0) {
    device_used_[device_row_[slot]] = 0;
    device_row_[slot] = -1;
    live_.erase(std::find(live_.begin(), live_.end(), static_cast<int>(slot)));
  } else {
    host_used_[host_row_[slot]] = 0;
    host_row_[slot] = -1;
    --demoted_count_;
  }
  positions_[slot] = -1;
  return absl::OkStatus();
}

void KvCache::CopyRow(const std::vector<float>& from_keys,
                      const std::vector<float>& from_values, int from_row,
                      std::vector<float>* to_keys,
                      std::vector<float>* to_values, int to_row) const {
  const size_t n = RowFloats();
  std::copy_n(from_keys.begin() + Offset(from_row, 0), n,
              to_keys->begin() + Offset(to_row, 0));
  std::copy_n(from_values.begin() + Offset(from_row, 0), n,
              to_values->begin() + Offset(to_row, 0));
}

absl::Status KvCache::Demote(uint64_t slot) {
  if (!Valid(slot) || device_row_[slot] < 0) {
    return absl::NotFoundError(
        absl::StrCat("kv cache: demoting slot ", slot, ", which is not live"));
  }
  auto host = std::find(host_used_.begin(), host_used_.end(), 0);
  if (host == host_used_.end()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: demoting slot ", slot, ": all ", host_capacity_,
                     " host rows are taken"));
  }
  *host = 1;
  const int host_row = static_cast<int>(host - host_used_.begin());
  const int row = device_row_[slot];
  CopyRow(keys_, values_, row, &host_keys_, &host_values_, host_row);
  device_used_[row] = 0;
  device_row_[slot] = -1;
  host_row_[slot] = host_row;
  live_.erase(std::find(live_.begin(), live_.end(), static_cast<int>(slot)));
  ++demoted_count_;
  peak_demoted_ = std::max(peak_demoted_, demoted_count_);
  ++demotions_;
  return absl::OkStatus();
}

absl::Status KvCache::Promote(uint64_t slot) {
  if (!Valid(slot) || host_row_[slot] < 0) {
    return absl::NotFoundError(absl::StrCat("kv cache: promoting slot ", slot,
                                            ", which is not demoted"));
  }
  auto free = std::find(device_used_.begin(), device_used_.end(), 0);
  if (free == device_used_.end()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: promoting slot ", slot, ": all ", capacity_,
                     " device rows are live"));
  }
  *free = 1;
  const int row = static_cast<int>(free - device_used_.begin());
  const int host_row = host_row_[slot];
  CopyRow(host_keys_, host_values_, host_row, &keys_, &values_, row);
  host_used_[host_row] = 0;
  host_row_[slot] = -1;
  device_row_[slot] = row;
  // Back in position order: after every live entry written before it.
  const int position = positions_[slot];
  auto at = std::find_if(live_.begin(), live_.end(),
                         [&](int s) { return positions_[s] > position; });
  live_.insert(at, static_cast<int>(slot));
  peak_live_ = std::max(peak_live_, live_count());
  --demoted_count_;
  ++promotions_;
  return absl::OkStatus();
}

void KvCache::Clear() {
  std::fill(positions_.begin(), positions_.end(), -1);
  std::fill(device_row_.begin(), device_row_.end(), -1);
  std::fill(host_row_.begin(), host_row_.end(), -1);
  std::fill(device_used_.begin(), device_used_.end(), 0);
  std::fill(host_used_.begin(), host_used_.end(), 0);
  live_.clear();
  demoted_count_ = 0;
  peak_demoted_ = 0;
  peak_live_ = 0;
  demotions_ = 0;
  promotions_ = 0;
}

absl::Span<float> KvCache::Key(int layer, int slot) {
  assert(device_row_[slot] >= 0);
  return absl::MakeSpan(keys_.data() + Offset(device_row_[slot], layer),
                        kv_dim_);
}
absl::Span<float> KvCache::Value(int layer, int slot) {
  assert(device_row_[slot] >= 0);
  return absl::MakeSpan(values_.data() + Offset(device_row_[slot], layer),
                        kv_dim_);
}
absl::Span<const float> KvCache::Key(int layer, int slot) const {
  assert(device_row_[slot] >= 0);
  return absl::MakeConstSpan(keys_.data() + Offset(device_row_[slot], layer),
                             kv_dim_);
}
absl::Span<const float> KvCache::Value(int layer, int slot) const {
  assert(device_row_[slot] >= 0);
  return absl::MakeConstSpan(values_.data() + Offset(device_row_[slot], layer),
                             kv_dim_);
}

}  // namespace entrokv::tinyllama
