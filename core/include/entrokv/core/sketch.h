// Key and query sketches: what an engine's side does to its vectors before
// they travel, so that the wire and the server carry `r` numbers per key and
// kv head instead of head_dim (docs/design.md "Performance model",
// docs/cost-model.md).
//
// With Shape::sketch_dim = r > 0 (`project:r`), every sent layer l and kv head
// g has a head_dim x r matrix P[l,g] with orthonormal columns; a key k of kv
// head g becomes P[l,g]^T k, and a query q of q head h becomes
// P[l, h / group]^T q, so that z = (P^T q)·(P^T k) / sqrt(head_dim). With
// QueryForm::kGroupSum each kv head's query is the sum of its group's queries
// (projected likewise). The default P is DefaultProjection(): a seeded random
// orthonormal matrix that needs nothing from the engine and that any language
// can rebuild bit for bit (it uses only +, -, x, / and sqrt in double). An
// engine may give its own matrices instead (e.g. PCA of its keys).
//
// Thread-safety: Sketcher is immutable after Create(); its methods are const
// and may run concurrently.

#ifndef ENTROKV_CORE_SKETCH_H_
#define ENTROKV_CORE_SKETCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "entrokv/core/config.h"

namespace entrokv {

// The default projection of model layer `model_layer`, kv head `kv_head`:
// head_dim x r, row-major ([j][c]), orthonormal columns, in double.
//
// Construction: base = SplitMix64(seed ^ (model_layer << 32 | kv_head));
// u_t = top 53 bits of SplitMix64(base + t) / 2^53 for t = 0, 1, ...;
// G[j][c] = (sum of the next 12 u_t) - 6, filled column by column (c outer,
// j inner); then modified Gram-Schmidt over the columns in order, each
// normalised by its sqrt of the sum of squares.
// REQUIRES: 1 <= r <= head_dim.
std::vector<double> DefaultProjection(uint64_t seed, int32_t model_layer,
                                      int32_t kv_head, int32_t head_dim,
                                      int32_t r);

class Sketcher {
 public:
  // A sketcher for `config`'s shape: the identity when exact and kPerHead.
  // `matrices` (optional) are the engine's own projections, one head_dim x r
  // row-major float matrix per (sent layer, kv head), layer-major; empty:
  // DefaultProjection(config.projection_seed, scored layer, kv head, ...).
  // Errors: InvalidArgument naming `projection` for a wrong size or a
  // non-finite element.
  static absl::StatusOr<Sketcher> Create(const SessionConfig& config,
                                         absl::Span<const float> matrices = {});

  // True when Keys() and Queries() copy their input unchanged.
  bool identity() const { return identity_; }

  // Elements the engine hands over: keys per entry (layers x kv_heads x
  // head_dim) and queries per step (layers x q_heads x head_dim).
  int64_t full_key_elements() const;
  int64_t full_query_elements() const;

  // n entries' keys [n][layer][kv_head][head_dim] -> [n][layer][kv_head][r].
  // REQUIRES: in.size() == n * full_key_elements(); `in` is not a view of
  // *out (Keys and Queries write *out while they read `in`).
  void Keys(absl::Span<const float> in, int64_t n,
            std::vector<float>* out) const;
  // Queries [layer][q_head][head_dim] -> the wire form of
  // config.shape (Shape::query_elements() floats).
  // REQUIRES: in.size() == full_query_elements(); `in` is not a view of *out.
  void Queries(absl::Span<const float> in, std::vector<float>* out) const;

 private:
  Sketcher() = default;
  Shape shape_;
  bool identity_ = true;
  // Per (sent layer, kv head): head_dim x r, row-major; empty when exact.
  std::vector<double> matrices_;
};

}  // namespace entrokv

#endif  // ENTROKV_CORE_SKETCH_H_
