// The scalar kernels and the run-time dispatch. The scoring kernels are
// written once in cpu_kernels_simd.h and compiled per ISA in
// cpu_kernels_avx2.cc and cpu_kernels_avx512.cc; this file is compiled for the
// baseline ISA and calls them only when the CPU has the ISA. The exception is
// the queries' one pass (PrepareQueries8), an AVX2 function here by target
// attribute: those files are compiled with -mfma, under which its multiply
// and add could be fused, and this one with -ffp-contract=off.

#include "cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_kernels_simd.h"
#include "x86_simd.h"

namespace entrokv::internal {
namespace {

inline float LoadElement(ElementType type, const std::byte* p, int64_t i) {
  switch (type) {
    case ElementType::kF32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case ElementType::kF16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return F16ToFloat(b);
    }
    case ElementType::kBf16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return Bf16ToFloat(b);
    }
  }
  return 0.0f;
}

void ScoreKeysScalar(const ScoreArgs& a) {
  const int64_t esize = static_cast<int64_t>(ElementSize(a.type));
  const int32_t d = a.head_dim;
  float key[1024];
  for (int32_t l = 0; l < a.layers; ++l) {
    for (int32_t kv = 0; kv < a.kv_heads; ++kv) {
      const std::byte* base =
          a.keys + ((int64_t{l} * a.kv_heads + kv) * a.capacity) * d * esize;
      const int32_t h0 = kv * a.group;
      const float* q = a.queries + (int64_t{l} * a.kv_heads * a.group + h0) * d;
      float* z =
          a.z == nullptr
              ? nullptr
              : a.z + (int64_t{l} * a.kv_heads * a.group + h0) * a.z_stride;
      for (int64_t p = 0; p < a.live; ++p) {
        const std::byte* k = base + p * d * esize;
        float group_sum = 0.0f;
        for (int32_t g = 0; g < a.group; ++g) {
          float acc = 0.0f;
          for (int32_t j0 = 0; j0 < d; j0 += 1024) {
            const int32_t m = d - j0 < 1024 ? d - j0 : 1024;
            for (int32_t j = 0; j < m; ++j)
              key[j] = LoadElement(a.type, k, j0 + j);
            const float* qg = q + int64_t{g} * d + j0;
            for (int32_t j = 0; j < m; ++j) acc += qg[j] * key[j];
          }
          if (a.z != nullptr) z[int64_t{g} * a.z_stride + p] = acc;
          group_sum += acc;
        }
        if (a.sum != nullptr) a.sum[p] += group_sum;
      }
    }
  }
}

#if defined(__x86_64__)

bool HaveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && HaveF16c() &&
                           __builtin_cpu_supports("fma");
  return have;
}

// PrepareQueries with dim % 8 == 0: eight elements at a time, each group's
// sum kept in a register across its vectors. A multiply and then an add, as
// in the scalar loop: the target has no FMA and the file is compiled with
// -ffp-contract=off (core/CMakeLists.txt), so none can be fused.
template <ElementType kType>
__attribute__((target("avx2,f16c"))) void PrepareQueries8(
    const std::byte* bytes, int64_t groups, int32_t group, int64_t dim,
    float scale, float* scaled, float* summed) {
  constexpr int64_t kSize = kType == ElementType::kF32 ? 4 : 2;
  const __m256 s = _mm256_set1_ps(scale);
  for (int64_t lk = 0; lk < groups; ++lk) {
    for (int64_t j = 0; j < dim; j += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int32_t g = 0; g < group; ++g) {
        const int64_t at = (lk * group + g) * dim + j;
        const __m256 x = _mm256_mul_ps(Load8<kType>(bytes + kSize * at), s);
        if (scaled != nullptr) _mm256_storeu_ps(scaled + at, x);
        acc = _mm256_add_ps(acc, x);
      }
      if (summed != nullptr) _mm256_storeu_ps(summed + lk * dim + j, acc);
    }
  }
}

#endif  // __x86_64__

}  // namespace

void ScoreKeys(const ScoreArgs& args) {
#if defined(__x86_64__)
  const bool sum_only =
      args.group == 1 && args.z == nullptr && args.sum != nullptr;
  if (sum_only && HaveAvx512() && args.head_dim % 16 == 0) {
    return SumKeysAvx512(args);
  }
  if (sum_only && HaveAvx2() && args.head_dim % 8 == 0) {
    return SumKeysAvx2(args);
  }
  if (HaveAvx512() && args.head_dim % 16 == 0) return ScoreKeysAvx512(args);
  if (HaveAvx2() && args.head_dim % 8 == 0) return ScoreKeysAvx2(args);
#endif
  ScoreKeysScalar(args);
}

void PrepareQueries(ElementType type, const std::byte* bytes, int64_t groups,
                    int32_t group, int64_t dim, float scale, float* scaled,
                    float* summed) {
#if defined(__x86_64__)
  if (dim % 8 == 0 && HaveAvx2()) {
    switch (type) {
      case ElementType::kF32:
        return PrepareQueries8<ElementType::kF32>(bytes, groups, group, dim,
                                                  scale, scaled, summed);
      case ElementType::kF16:
        return PrepareQueries8<ElementType::kF16>(bytes, groups, group, dim,
                                                  scale, scaled, summed);
      case ElementType::kBf16:
        return PrepareQueries8<ElementType::kBf16>(bytes, groups, group, dim,
                                                   scale, scaled, summed);
    }
  }
#endif
  // Decoded a chunk at a time into a buffer that stays in L1, so that each
  // query element is read from memory once.
  constexpr int64_t kChunk = 256;
  float decoded[kChunk];
  const size_t esize = ElementSize(type);
  for (int64_t lk = 0; lk < groups; ++lk) {
    float* sum = summed != nullptr ? summed + lk * dim : nullptr;
    for (int32_t g = 0; g < group; ++g) {
      const int64_t row = lk * group + g;
      for (int64_t begin = 0; begin < dim; begin += kChunk) {
        const int64_t n = std::min(kChunk, dim - begin);
        DecodeElements(type, bytes + (row * dim + begin) * esize,
                       static_cast<size_t>(n), decoded);
        for (int64_t j = 0; j < n; ++j) decoded[j] *= scale;
        if (scaled != nullptr) {
          std::memcpy(scaled + row * dim + begin, decoded,
                      static_cast<size_t>(n) * sizeof(float));
        }
        if (sum == nullptr) continue;
        float* s = sum + begin;
        if (g == 0) {
          for (int64_t j = 0; j < n; ++j) s[j] = 0.0f + decoded[j];
        } else {
          for (int64_t j = 0; j < n; ++j) s[j] += decoded[j];
        }
      }
    }
  }
}

void AccumulateSoftmaxScalar(float* z, int64_t rows, int64_t n, double weight,
                             double* attention) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = z + r * n;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t p = 0; p < n; ++p) max = std::max(max, row[p]);
    double sum = 0.0;
    for (int64_t p = 0; p < n; ++p) {
      row[p] = std::exp(row[p] - max);
      sum += row[p];
    }
    const double inv = weight / sum;
    for (int64_t p = 0; p < n; ++p) attention[p] += row[p] * inv;
  }
}

void AccumulateSoftmax(float* z, int64_t rows, int64_t n, double weight,
                       double* attention) {
#if defined(__x86_64__)
  if (HaveAvx512())
    return AccumulateSoftmaxAvx512(z, rows, n, weight, attention);
#endif
  AccumulateSoftmaxScalar(z, rows, n, weight, attention);
}

const char* ScoreKernelName() {
#if defined(__x86_64__)
  if (HaveAvx512()) return "avx512";
  if (HaveAvx2()) return "avx2";
#endif
  return "scalar";
}

}  // namespace entrokv::internal
