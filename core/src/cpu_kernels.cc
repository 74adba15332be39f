#include "cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12's _mm512_cvtph_ps passes _mm512_undefined_ps() through, which trips
// -Wmaybe-uninitialized at every use; the value is fully overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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

__attribute__((target("avx2,fma,f16c"))) inline __m256 Load8(
    ElementType type, const std::byte* p) {
  switch (type) {
    case ElementType::kF16:
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    case ElementType::kBf16:
      return _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          16));
    case ElementType::kF32:
    default:
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  }
}

__attribute__((target("avx2,fma,f16c"))) inline float HorizontalSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// REQUIRES: head_dim % 8 == 0.
template <ElementType kType>
__attribute__((target("avx2,fma,f16c"))) void ScoreKeysAvx2(
    const ScoreArgs& a) {
  constexpr int64_t esize = kType == ElementType::kF32 ? 4 : 2;
  const int32_t d = a.head_dim;
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
        if (p + 2 < a.live) {
          _mm_prefetch(reinterpret_cast<const char*>(k + 2 * d * esize),
                       _MM_HINT_T0);
        }
        // Groups of up to four query heads share each converted key chunk.
        for (int32_t g0 = 0; g0 < a.group; g0 += 4) {
          const int32_t ng = a.group - g0 < 4 ? a.group - g0 : 4;
          const float* q0 = q + int64_t{g0} * d;
          __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
          __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
          for (int32_t j = 0; j < d; j += 8) {
            const __m256 kf = Load8(kType, k + j * esize);
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + j), kf, acc0);
            if (ng > 1)
              acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d + j), kf, acc1);
            if (ng > 2)
              acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 2 * d + j), kf, acc2);
            if (ng > 3)
              acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 3 * d + j), kf, acc3);
          }
          if (z != nullptr) {
            float* zg = z + int64_t{g0} * a.z_stride + p;
            zg[0] = HorizontalSum(acc0);
            if (ng > 1) zg[a.z_stride] = HorizontalSum(acc1);
            if (ng > 2) zg[2 * a.z_stride] = HorizontalSum(acc2);
            if (ng > 3) zg[3 * a.z_stride] = HorizontalSum(acc3);
          }
          if (a.sum != nullptr) {
            // Unused accumulators are zero, so one sum covers the group.
            a.sum[p] += HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc0, acc1),
                                                    _mm256_add_ps(acc2, acc3)));
          }
        }
      }
    }
  }
}

// The AVX2 twin of SumKeysAvx512. REQUIRES: head_dim % 8 == 0, group == 1,
// sum != nullptr, z == nullptr.
template <ElementType kType>
__attribute__((target("avx2,fma,f16c"))) void SumKeysAvx2(const ScoreArgs& a) {
  constexpr int64_t esize = kType == ElementType::kF32 ? 4 : 2;
  const int32_t d = a.head_dim;
  const int64_t row = int64_t{d} * esize;
  for (int32_t l = 0; l < a.layers; ++l) {
    for (int32_t kv = 0; kv < a.kv_heads; ++kv) {
      const int64_t plane = int64_t{l} * a.kv_heads + kv;
      const std::byte* base = a.keys + plane * a.capacity * row;
      const float* q = a.queries + plane * d;
      int64_t p = 0;
      for (; p + 1 < a.live; p += 2) {
        const std::byte* k0 = base + p * row;
        const std::byte* k1 = k0 + row;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        for (int32_t j = 0; j < d; j += 8) {
          const __m256 qj = _mm256_loadu_ps(q + j);
          acc0 = _mm256_fmadd_ps(qj, Load8(kType, k0 + j * esize), acc0);
          acc1 = _mm256_fmadd_ps(qj, Load8(kType, k1 + j * esize), acc1);
        }
        a.sum[p] += HorizontalSum(acc0);
        a.sum[p + 1] += HorizontalSum(acc1);
      }
      for (; p < a.live; ++p) {
        const std::byte* k0 = base + p * row;
        __m256 acc0 = _mm256_setzero_ps();
        for (int32_t j = 0; j < d; j += 8) {
          acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + j),
                                 Load8(kType, k0 + j * esize), acc0);
        }
        a.sum[p] += HorizontalSum(acc0);
      }
    }
  }
}

#define ENTROKV_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

ENTROKV_AVX512 inline __m512 Load16(ElementType type, const std::byte* p) {
  switch (type) {
    case ElementType::kF16:
      return _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    case ElementType::kBf16:
      return _mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
          16));
    case ElementType::kF32:
    default:
      return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
  }
}

// REQUIRES: head_dim % 16 == 0.
template <ElementType kType>
ENTROKV_AVX512 void ScoreKeysAvx512(const ScoreArgs& a) {
  constexpr int64_t esize = kType == ElementType::kF32 ? 4 : 2;
  const int32_t d = a.head_dim;
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
        if (p + 2 < a.live) {
          _mm_prefetch(reinterpret_cast<const char*>(k + 2 * d * esize),
                       _MM_HINT_T0);
        }
        for (int32_t g0 = 0; g0 < a.group; g0 += 4) {
          const int32_t ng = a.group - g0 < 4 ? a.group - g0 : 4;
          const float* q0 = q + int64_t{g0} * d;
          __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
          __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
          for (int32_t j = 0; j < d; j += 16) {
            const __m512 kf = Load16(kType, k + j * esize);
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + j), kf, acc0);
            if (ng > 1)
              acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + d + j), kf, acc1);
            if (ng > 2)
              acc2 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 2 * d + j), kf, acc2);
            if (ng > 3)
              acc3 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 3 * d + j), kf, acc3);
          }
          if (z != nullptr) {
            float* zg = z + int64_t{g0} * a.z_stride + p;
            zg[0] = _mm512_reduce_add_ps(acc0);
            if (ng > 1) zg[a.z_stride] = _mm512_reduce_add_ps(acc1);
            if (ng > 2) zg[2 * a.z_stride] = _mm512_reduce_add_ps(acc2);
            if (ng > 3) zg[3 * a.z_stride] = _mm512_reduce_add_ps(acc3);
          }
          if (a.sum != nullptr) {
            a.sum[p] += _mm512_reduce_add_ps(_mm512_add_ps(
                _mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
          }
        }
      }
    }
  }
}

// One query per kv head (a group's summed query), accumulating only the sum:
// the kernel of the mean logit. Two keys per iteration for two FMA chains.
// REQUIRES: head_dim % 16 == 0, group == 1, sum != nullptr, z == nullptr.
template <ElementType kType>
ENTROKV_AVX512 void SumKeysAvx512(const ScoreArgs& a) {
  constexpr int64_t esize = kType == ElementType::kF32 ? 4 : 2;
  const int32_t d = a.head_dim;
  const int64_t row = int64_t{d} * esize;
  for (int32_t l = 0; l < a.layers; ++l) {
    for (int32_t kv = 0; kv < a.kv_heads; ++kv) {
      const int64_t plane = int64_t{l} * a.kv_heads + kv;
      const std::byte* base = a.keys + plane * a.capacity * row;
      const float* q = a.queries + plane * d;
      int64_t p = 0;
      for (; p + 1 < a.live; p += 2) {
        const std::byte* k0 = base + p * row;
        const std::byte* k1 = k0 + row;
        _mm_prefetch(reinterpret_cast<const char*>(k0 + 4 * row), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(k1 + 4 * row), _MM_HINT_T0);
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        for (int32_t j = 0; j < d; j += 16) {
          const __m512 qj = _mm512_loadu_ps(q + j);
          acc0 = _mm512_fmadd_ps(qj, Load16(kType, k0 + j * esize), acc0);
          acc1 = _mm512_fmadd_ps(qj, Load16(kType, k1 + j * esize), acc1);
        }
        a.sum[p] += _mm512_reduce_add_ps(acc0);
        a.sum[p + 1] += _mm512_reduce_add_ps(acc1);
      }
      for (; p < a.live; ++p) {
        const std::byte* k0 = base + p * row;
        __m512 acc0 = _mm512_setzero_ps();
        for (int32_t j = 0; j < d; j += 16) {
          acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + j),
                                 Load16(kType, k0 + j * esize), acc0);
        }
        a.sum[p] += _mm512_reduce_add_ps(acc0);
      }
    }
  }
}

// exp(x) for x <= 0 (Cephes expf: Cody-Waite reduction, degree-6 polynomial,
// scaling by 2^n with scalef, which underflows to 0 gracefully).
ENTROKV_AVX512 inline __m512 ExpNonPositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-103.0f));
  const __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x),
                      _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
}

// Every position goes through the same instructions (the tails through
// masked loads and stores, never a scalar std::exp or a separate multiply and
// add), so equal logits get bit-identical attention wherever they sit: the tie
// rule of docs/step-semantics.md section 8 depends on it.
ENTROKV_AVX512 void AccumulateSoftmaxAvx512(float* z, int64_t rows, int64_t n,
                                            double weight, double* attention) {
  const int64_t n16 = n - n % 16;
  const __mmask16 tail16 = static_cast<__mmask16>((1u << (n % 16)) - 1);
  const int64_t n8 = n - n % 8;
  const __mmask8 tail8 = static_cast<__mmask8>((1u << (n % 8)) - 1);
  const __m512 neg_inf =
      _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < rows; ++r) {
    float* row = z + r * n;
    __m512 vmax = neg_inf;
    for (int64_t p = 0; p < n16; p += 16)
      vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(row + p));
    if (tail16 != 0) {
      vmax =
          _mm512_max_ps(vmax, _mm512_mask_loadu_ps(neg_inf, tail16, row + n16));
    }
    const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t p = 0; p < n16; p += 16) {
      const __m512 e =
          ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(row + p), vm));
      _mm512_storeu_ps(row + p, e);
      vsum = _mm512_add_ps(vsum, e);
    }
    if (tail16 != 0) {
      // Lanes past the row read the maximum (exp 0 = 1) and are not summed.
      const __m512 e = ExpNonPositive(
          _mm512_sub_ps(_mm512_mask_loadu_ps(vm, tail16, row + n16), vm));
      _mm512_mask_storeu_ps(row + n16, tail16, e);
      vsum = _mm512_mask_add_ps(vsum, tail16, vsum, e);
    }
    const __m512d vinv = _mm512_set1_pd(
        weight / static_cast<double>(_mm512_reduce_add_ps(vsum)));
    for (int64_t p = 0; p < n8; p += 8) {
      const __m512d e = _mm512_cvtps_pd(_mm256_loadu_ps(row + p));
      _mm512_storeu_pd(
          attention + p,
          _mm512_fmadd_pd(e, vinv, _mm512_loadu_pd(attention + p)));
    }
    if (tail8 != 0) {
      const __m512d e = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(tail8, row + n8));
      _mm512_mask_storeu_pd(
          attention + n8, tail8,
          _mm512_fmadd_pd(e, vinv,
                          _mm512_maskz_loadu_pd(tail8, attention + n8)));
    }
  }
}

bool HaveAvx512() {
  static const bool have =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c") &&
      __builtin_cpu_supports("fma");
  return have;
}

bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2") &&
                           __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("f16c");
  return have;
}

#endif  // __x86_64__

}  // namespace

void ScoreKeys(const ScoreArgs& args) {
#if defined(__x86_64__)
  const bool sum_only =
      args.group == 1 && args.z == nullptr && args.sum != nullptr;
  if (sum_only && HaveAvx512() && args.head_dim % 16 == 0) {
    switch (args.type) {
      case ElementType::kF32:
        return SumKeysAvx512<ElementType::kF32>(args);
      case ElementType::kF16:
        return SumKeysAvx512<ElementType::kF16>(args);
      case ElementType::kBf16:
        return SumKeysAvx512<ElementType::kBf16>(args);
    }
  }
  if (sum_only && HaveAvx2() && args.head_dim % 8 == 0) {
    switch (args.type) {
      case ElementType::kF32:
        return SumKeysAvx2<ElementType::kF32>(args);
      case ElementType::kF16:
        return SumKeysAvx2<ElementType::kF16>(args);
      case ElementType::kBf16:
        return SumKeysAvx2<ElementType::kBf16>(args);
    }
  }
  if (HaveAvx512() && args.head_dim % 16 == 0) {
    switch (args.type) {
      case ElementType::kF32:
        return ScoreKeysAvx512<ElementType::kF32>(args);
      case ElementType::kF16:
        return ScoreKeysAvx512<ElementType::kF16>(args);
      case ElementType::kBf16:
        return ScoreKeysAvx512<ElementType::kBf16>(args);
    }
  }
  if (HaveAvx2() && args.head_dim % 8 == 0) {
    switch (args.type) {
      case ElementType::kF32:
        return ScoreKeysAvx2<ElementType::kF32>(args);
      case ElementType::kF16:
        return ScoreKeysAvx2<ElementType::kF16>(args);
      case ElementType::kBf16:
        return ScoreKeysAvx2<ElementType::kBf16>(args);
    }
  }
#endif
  ScoreKeysScalar(args);
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
