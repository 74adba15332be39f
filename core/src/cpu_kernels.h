// The CPU scoring kernel: scaled dot products of every live key with the
// queries of its GQA group, reading each key once for the whole group.
// Dispatches at run time to an AVX-512 or AVX2/FMA/F16C version when the CPU
// has it (cpu_kernels_simd.h). Thread-safe (pure functions).

#ifndef ENTROKV_CORE_SRC_CPU_KERNELS_H_
#define ENTROKV_CORE_SRC_CPU_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "entrokv/core/element_type.h"

namespace entrokv::internal {

struct ScoreArgs {
  ElementType type;
  // Keys laid out [layer][kv_head][capacity][head_dim] in `type`.
  const std::byte* keys;
  int64_t capacity;
  int32_t layers;
  int32_t kv_heads;
  int32_t group;  // q heads per kv head.
  int32_t head_dim;
  int64_t live;  // Positions 0..live-1 are scored.
  // Queries [layer][q_head][head_dim], already multiplied by 1/sqrt(head_dim).
  const float* queries;
  // Output z, [layer][q_head][z_stride] with z_stride >= live; may be null.
  float* z;
  int64_t z_stride;
  // When not null: sum[p] += Σ over (layer, q head) of z for every position p
  // (live doubles), without writing z.
  double* sum = nullptr;
};

void ScoreKeys(const ScoreArgs& args);

// A step's queries, `groups` × `group` vectors of `dim` elements in `type` at
// `bytes` (q head = kv head · group + g), decoded and multiplied by `scale` in
// one pass: written to `scaled` (same layout) when not null, and each group's
// sum to `summed` ([groups][dim], the scaled vectors of g = 0, 1, ... added in
// that order to 0.0f) when not null. Bit-identical to decoding, then scaling,
// then summing in three passes; the memory traffic of one.
void PrepareQueries(ElementType type, const std::byte* bytes, int64_t groups,
                    int32_t group, int64_t dim, float scale, float* scaled,
                    float* summed);

// For each of `rows` rows of `z` (row r at z + r·n, n >= 1 entries) adds
// weight · softmax(row)[p] to attention[p]. Overwrites z with exp(z − max).
// Vectorised (AVX-512, a Cephes-style exp with relative error < 2e-7) when
// the CPU has it. The value added at p depends only on z[p] and the row, never
// on p: equal logits get bit-identical attention (the tie rule).
void AccumulateSoftmax(float* z, int64_t rows, int64_t n, double weight,
                       double* attention);

// The portable version AccumulateSoftmax falls back to without AVX-512
// (std::exp, so not bit-identical to the vector one); exposed so that tests
// can check it on any CPU.
void AccumulateSoftmaxScalar(float* z, int64_t rows, int64_t n, double weight,
                             double* attention);

// The name of the kernel ScoreKeys dispatches to ("avx512", "avx2" or
// "scalar").
const char* ScoreKernelName();

}  // namespace entrokv::internal

#endif  // ENTROKV_CORE_SRC_CPU_KERNELS_H_
