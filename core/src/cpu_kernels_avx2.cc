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
  static constexpr int32_t kReduceBlock = 0;

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
};

}  // namespace

void ScoreKeysAvx2(const ScoreArgs& args) {
  simd::ScoreKeysForType<Avx2>(args);
}

void SumKeysAvx2(const ScoreArgs& args) { simd::SumKeysForType<Avx2>(args); }

}  // namespace entrokv::internal

#endif  // __x86_64__
