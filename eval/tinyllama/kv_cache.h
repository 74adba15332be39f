// KvCache: the example engine's own key/value cache, with slot ids, and an
// optional host tier (docs/step-semantics.md section 12).
//
// A slot id names an entry for as long as the engine holds it; it is the
// 64-bit slot id the engine gives entrokv. An entry is *live* (its keys and
// values in a row of the device store, attended to) or *demoted* (in a row of
// the host store, not attended to). Appending a token takes the lowest free
// id and the lowest free device row and stores that token's post-RoPE keys
// and values for every layer. Evicting an entry, live or demoted, really
// frees its row and its id: a later token may reuse both (entrokv allows an
// evicted id to be named again). Demote() copies a live entry's keys and
// values, every layer, to a free host row and frees its device row; Promote()
// copies them back to a free device row (not necessarily the one it left)
// and frees the host row. A demoted entry keeps its id, so no new token takes
// it. Without a host tier (host_capacity 0) an entry's id is its device row.
//
// Attention runs over the live entries in append (position) order, a
// promoted entry taking its place by position again, so that with nothing
// evicted or demoted it is the full-cache computation of llama2.c, operation
// for operation. Keys keep the absolute RoPE position they were written with.
//
// Not thread-safe: owned by one decode loop.

#ifndef ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_KV_CACHE_H_
#define ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_KV_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace entrokv::tinyllama {

class KvCache {
 public:
  // `kv_dim` = kv_heads · head_dim floats per layer and entry; `capacity`
  // device rows and `host_capacity` host rows (0: no host tier). Ids run
  // over [0, capacity + host_capacity).
  KvCache(int layers, int kv_dim, int capacity, int host_capacity = 0);

  int layers() const { return layers_; }
  int kv_dim() const { return kv_dim_; }
  int capacity() const { return capacity_; }
  int host_capacity() const { return host_capacity_; }
  // Bytes one entry's keys and values take, every layer: what a demotion or
  // a promotion moves.
  int64_t entry_bytes() const {
    return int64_t{2} * layers_ * kv_dim_ * static_cast<int64_t>(sizeof(float));
  }

  // Takes a free id and device row for a token at `position`; its keys and
  // values are to be written through Key() / Value(). ResourceExhausted when
  // every device row is live.
  absl::StatusOr<int> Append(int position);

  // Frees `slot`, live or demoted. NotFound when the id is neither (a double
  // free, or an id the cache never gave out).
  absl::Status Evict(uint64_t slot);

  // Moves live `slot` to the host tier. NotFound when it is not live;
  // ResourceExhausted when every host row is taken.
  absl::Status Demote(uint64_t slot);

  // Moves demoted `slot` back to the device. NotFound when it is not
  // demoted; ResourceExhausted when every device row is taken.
  absl::Status Promote(uint64_t slot);

  // Frees every id and row (the counters included).
  void Clear();

  // REQUIRES: 0 <= layer < layers(), slot live.
  absl::Span<float> Key(int layer, int slot);
  absl::Span<float> Value(int layer, int slot);
  absl::Span<const float> Key(int layer, int slot) const;
  absl::Span<const float> Value(int layer, int slot) const;

  // The live slots in append (position) order.
  const std::vector<int>& live() const { return live_; }
  int live_count() const { return static_cast<int>(live_.size()); }
  int demoted_count() const { return demoted_count_; }
  // The most slots demoted at once since construction or Clear().
  int peak_demoted() const { return peak_demoted_; }
  bool is_live(int slot) const { return device_row_[slot] >= 0; }
  bool is_demoted(int slot) const { return host_row_[slot] >= 0; }
  // The device row of a live slot (-1 otherwise).
  int device_row(int slot) const { return device_row_[slot]; }
  // The most slots live at once since construction or Clear().
  int peak_live() const { return peak_live_; }
  // Position of a live or demoted slot; -1 when the id is free.
  int position(int slot) const { return positions_[slot]; }
  // Demotions and promotions done, and the bytes they moved, since
  // construction or Clear().
  int64_t demotions() const { return demotions_; }
  int64_t promotions() const { return promotions_; }
  int64_t bytes_moved() const {
    return (demotions_ + promotions_) * entry_bytes();
  }

 private:
  // Offset of (row, layer) in a store laid out [row][layer][kv_dim].
  size_t Offset(int row, int layer) const {
    return (static_cast<size_t>(row) * layers_ + layer) * kv_dim_;
  }
  size_t RowFloats() const { return static_cast<size_t>(layers_) * kv_dim_; }
  // Copies one row, every layer, keys and values, between stores.
  void CopyRow(const std::vector<float>& from_keys,
               const std::vector<float>& from_values, int from_row,
               std::vector<float>* to_keys, std::vector<float>* to_values,
               int to_row) const;
  bool Valid(uint64_t slot) const {
    return slot < static_cast<uint64_t>(positions_.size());
  }

  int layers_;
  int kv_dim_;
  int capacity_;
  int host_capacity_;
  std::vector<float> keys_;           // Device: [row][layer][kv_dim].
  std::vector<float> values_;         // Device: [row][layer][kv_dim].
  std::vector<float> host_keys_;      // Host: [row][layer][kv_dim].
  std::vector<float> host_values_;    // Host: [row][layer][kv_dim].
  std::vector<int> positions_;        // Per id; -1 when free.
  std::vector<int> device_row_;       // Per id; -1 when not live.
  std::vector<int> host_row_;         // Per id; -1 when not demoted.
  std::vector<uint8_t> device_used_;  // Per device row.
  std::vector<uint8_t> host_used_;    // Per host row.
  std::vector<int> live_;             // Live slots in append order.
  int demoted_count_ = 0;
  int peak_demoted_ = 0;
  int peak_live_ = 0;
  int64_t demotions_ = 0;
  int64_t promotions_ = 0;
};

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_KV_CACHE_H_
