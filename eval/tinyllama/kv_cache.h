// KvCache: the example engine's own key/value cache, with slot ids.
//
// The cache owns a fixed pool of physical slots. Appending a token takes a free
// slot (the lowest-numbered one) and stores that token's post-RoPE keys and
// values for every layer; the slot number is the 64-bit slot id the engine
// gives entrokv. Evicting a slot really frees it: its keys and values are no
// longer attended to, and a later token may reuse the slot (entrokv allows an
// evicted id to be named again). Attention runs over the live entries in
// append (position) order, so that with nothing evicted it is the full-cache
// computation of llama2.c, operation for operation. Keys keep the absolute RoPE
// position they were written with.
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
  // `kv_dim` = kv_heads · head_dim floats per layer and entry.
  KvCache(int layers, int kv_dim, int capacity);

  int layers() const { return layers_; }
  int kv_dim() const { return kv_dim_; }
  int capacity() const { return capacity_; }

  // Takes a free slot for a token at `position`; its keys and values are to be
  // written through Key() / Value(). ResourceExhausted when every slot is live.
  absl::StatusOr<int> Append(int position);

  // Frees `slot`. NotFound when the slot is not live (a double free, or an id
  // the cache never gave out).
  absl::Status Evict(uint64_t slot);

  // Frees every slot.
  void Clear();

  // REQUIRES: 0 <= layer < layers(), slot live.
  absl::Span<float> Key(int layer, int slot);
  absl::Span<float> Value(int layer, int slot);
  absl::Span<const float> Key(int layer, int slot) const;
  absl::Span<const float> Value(int layer, int slot) const;

  // The live slots in append order.
  const std::vector<int>& live() const { return live_; }
  int live_count() const { return static_cast<int>(live_.size()); }
  // The most slots live at once since construction or Clear().
  int peak_live() const { return peak_live_; }
  int position(int slot) const { return positions_[slot]; }

 private:
  size_t Offset(int layer, int slot) const {
    return (static_cast<size_t>(slot) * layers_ + layer) * kv_dim_;
  }

  int layers_;
  int kv_dim_;
  int capacity_;
  std::vector<float> keys_;     // [slot][layer][kv_dim]
  std::vector<float> values_;   // [slot][layer][kv_dim]
  std::vector<int> positions_;  // Per slot; -1 when free.
  std::vector<int> live_;       // Live slots in append order.
  int peak_live_ = 0;
};

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_KV_CACHE_H_
