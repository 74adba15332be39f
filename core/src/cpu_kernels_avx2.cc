// The AVX2/FMA/F16C instantiation of the vector kernels
// (cpu_kernels_simd.h). Compiled with -mavx2 -mfma -mf16c (core/CMakeLists.txt)
// and called only after a run-time CPU check; nothing here may be shared with
// code compiled for the baseline ISA, so everything but the entry points has
// internal linkage and no standard-library template is used.

#include <cstddef>

#include "cpu_kernels_simd.h"

#if defined(__x86_64__)
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "cpu_kernels_avx2.cc must be compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

namespace entrokv::internal {
namespace {

struct Avx2 {
  using Vec = __m256;
  static constexpr int32_t kWidth = 8;
  static constexpr int64_t kPrefetchBytes = 0;

  [[gnu::always_inline]] static Vec Zero() { return _mm256_setzero_ps(); }
  [[gnu::always_inline]] static Vec LoadQuery(const float* p) {
    return _mm256_loadu_ps(p);
  }
  [[gnu::always_inline]] static Vec LoadKey(ElementType type,
                                            const std::byte* p) {
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
  [[gnu::always_inline]] static Vec Fmadd(Vec a, Vec b, Vec c) {
    return _mm256_fmadd_ps(a, b, c);
  }
  [[gnu::always_inline]] static Vec Add(Vec a, Vec b) {
    return _mm256_add_ps(a, b);
  }
  [[gnu::always_inline]] static float ReduceAdd(Vec v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
  }
  [[gnu::always_inline]] static void Prefetch(const std::byte* p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  }

  // ReduceAdd of 8 vectors at once (ReduceAddBlock): lane k of the result
  // is bit for bit ReduceAdd(acc[k]). ReduceAdd sums a vector's lanes as
  // s[i] = (i + i+4) for i < 4, then (s0 + s2) + (s1 + s3); this does the
  // same additions, 8 vectors' worth per instruction (float addition is
  // commutative, so only which values are added matters). Level 1 pairs
  // vector k with k + 4 so that the last level lands vector k in lane k.
  static constexpr int32_t kReduceBlock = 8;
  [[gnu::always_inline]] static Vec ReduceAddBlock(const Vec* acc) {
    // Level 1: x[j]'s 128-bit half 0 holds vector j's s, half 1 vector
    // j + 4's.
    Vec x[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const Vec a = acc[j], b = acc[j + 4];
      x[j] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20),   // a.lo b.lo
                           _mm256_permute2f128_ps(a, b, 0x31));  // a.hi b.hi
    }
    // Level 2: (s0 + s2) and (s1 + s3) of two vectors per half.
    Vec y[2];
#pragma GCC unroll 2
    for (int m = 0; m < 2; ++m) {
      const Vec a = x[2 * m], b = x[2 * m + 1];
      y[m] = _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x44),   // a0 a1 b0 b1
                           _mm256_shuffle_ps(a, b, 0xEE));  // a2 a3 b2 b3
    }
    // Level 3: the two of each vector. Lanes: 0 1 2 3 | 4 5 6 7.
    return _mm256_add_ps(_mm256_shuffle_ps(y[0], y[1], 0x88),   // even
                         _mm256_shuffle_ps(y[0], y[1], 0xDD));  // odd
  }
  [[gnu::always_inline]] static void Store(float* p, Vec v) {
    _mm256_storeu_ps(p, v);
  }
  // sum[k] += lane k, in double, for k < 8 (as sum[k] += ReduceAdd would).
  [[gnu::always_inline]] static void AddToSums(double* sum, Vec v) {
    _mm256_storeu_pd(sum, _mm256_add_pd(_mm256_loadu_pd(sum),
                                        _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
    _mm256_storeu_pd(sum + 4,
                     _mm256_add_pd(_mm256_loadu_pd(sum + 4),
                                   _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
  }
};

}  // namespace

void ScoreKeysAvx2(const ScoreArgs& args) {
  simd::ScoreKeysForType<Avx2>(args);
}

void SumKeysAvx2(const ScoreArgs& args) { simd::SumKeysForType<Avx2>(args); }

}  // namespace entrokv::internal

#endif  // __x86_64__
