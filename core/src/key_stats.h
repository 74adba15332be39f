// The per-entry statistics of the keydiff, rkv and expected rankings that the
// CPU backend computes from its stored keys (docs/step-semantics.md sections 3
// and 5): keydiff's cosine to the live keys' mean direction, rkv's
// redundancy, and expected's Gaussian query model and the variance term of
// its expected logits. Pure
// functions and plain state; not thread-safe.

#ifndef ENTROKV_CORE_SRC_KEY_STATS_H_
#define ENTROKV_CORE_SRC_KEY_STATS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entrokv/core/element_type.h"

namespace entrokv::internal {

// Keys laid out [plane = layer·kv_heads + kv_head][capacity][dim] in `type`;
// positions 0..live-1 are live.
struct KeyPlanes {
  ElementType type;
  const std::byte* keys;
  int64_t capacity;
  int32_t planes;
  int32_t dim;
  int64_t live;
};

// keydiff: out[p] = −(1/planes) Σ_planes cos(k_p, m), with m the mean over
// live positions of k/‖k‖ in that plane; a zero key, or a zero m, has
// cosine 0. Norms, m and the dot products in double. Each key is decoded
// twice (for m, then for its cosine). The scratch buffers are reused.
void KeyDiffScores(const KeyPlanes& keys, std::vector<double>* out,
                   std::vector<double>* scratch,
                   std::vector<float>* row_scratch);

// rkv (R-KV): the reference rows the redundancy compares every live entry
// with: the positions of the live entries in append order when live <=
// `sample`, else those of append rank floor(t·live / sample), t = 0 ..
// sample − 1. `index` holds each position's append index.
void RedundancyRows(const int64_t* index, int64_t live, int64_t sample,
                    std::vector<int32_t>* rows);

// rkv: out[p] = R_p, the mean over planes of softmax_p(r[p]), with r[p] the
// mean over the reference rows i of S_ip: the cosine of k_i and k_p, except
// 0 for p = i and for the one p with the largest append index among those
// whose cosine with k_i exceeds 0.5 (the most recent duplicate of i is not
// counted as redundant). Cosines as (k_i·k_p)·(1/‖k_i‖)·(1/‖k_p‖) in double,
// 0 for a zero key; sums in row, then position, then plane order.
struct RedundancyScratch {
  std::vector<float> decoded;    // live × dim of one plane.
  std::vector<double> inv_norm;  // live.
  std::vector<double> cos;       // live: one row's cosines.
  std::vector<double> r;         // live.
};
void RedundancyScores(const KeyPlanes& keys, const int64_t* index,
                      const std::vector<int32_t>& rows,
                      std::vector<double>* out, RedundancyScratch* scratch);

// expected: the running mean and diagonal variance of each query element
// (section 5), over the queries of the decision steps.
class QueryStats {
 public:
  // Folds one step's `count` query elements (unscaled) in: the first call sets
  // μ = q and σ² = 0; later ones σ² ← (1 − r)(σ² + r(q − μ)²), μ ← μ + r(q −
  // μ), r = `rate`, in double.
  void Update(const float* queries, size_t count, double rate);

  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& var() const { return var_; }

 private:
  std::vector<double> mean_;
  std::vector<double> var_;
};

// expected: adds to z[r·z_stride + p], for every row r = (layer, q head) and
// live position p, the variance term Σ_j σ²[r, j]·k[p, j]² / (2·head_dim) of
// the row's kv head's key, summed in double; each sum is then rounded to
// float. `var` is [layer][q_head][dim]; `group` q heads per kv head.
void AddVarianceTerm(const KeyPlanes& keys, int32_t group, int32_t head_dim,
                     const std::vector<double>& var, float* z,
                     int64_t z_stride, std::vector<float>* scratch);

}  // namespace entrokv::internal

#endif  // ENTROKV_CORE_SRC_KEY_STATS_H_
