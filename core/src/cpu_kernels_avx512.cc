// The AVX-512 instantiation of the vector kernels (cpu_kernels_simd.h) and the
// AVX-512 softmax. Compiled with -mavx512f -mavx512bw -mavx512vl -mfma -mf16c
// (core/CMakeLists.txt) and called only after a run-time CPU check; nothing
// here may be shared with code compiled for the baseline ISA, so everything
// but the entry points has internal linkage and no standard-library template
// is used.

#include <cstddef>
#include <limits>

#include "cpu_kernels_simd.h"

#if defined(__x86_64__)
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || \
    !defined(__AVX512VL__) || !defined(__FMA__) || !defined(__F16C__)
#error \
    "cpu_kernels_avx512.cc must be compiled with -mavx512f -mavx512bw -mavx512vl -mfma -mf16c"
#endif
#include <immintrin.h>
// GCC 12's _mm512_cvtph_ps passes _mm512_undefined_ps() through, which trips
// -Wmaybe-uninitialized at every use; the value is fully overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace entrokv::internal {
namespace {

struct Avx512 {
  using Vec = __m512;
  static constexpr int32_t kWidth = 16;
  static constexpr int64_t kPrefetchBytes = 8192;

  [[gnu::always_inline]] static Vec Zero() { return _mm512_setzero_ps(); }
  [[gnu::always_inline]] static Vec LoadQuery(const float* p) {
    return _mm512_loadu_ps(p);
  }
  [[gnu::always_inline]] static Vec LoadKey(ElementType type,
                                            const std::byte* p) {
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
  [[gnu::always_inline]] static Vec Fmadd(Vec a, Vec b, Vec c) {
    return _mm512_fmadd_ps(a, b, c);
  }
  [[gnu::always_inline]] static Vec Add(Vec a, Vec b) {
    return _mm512_add_ps(a, b);
  }
  [[gnu::always_inline]] static float ReduceAdd(Vec v) {
    return _mm512_reduce_add_ps(v);
  }
  [[gnu::always_inline]] static void Prefetch(const std::byte* p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  }

  // ReduceAdd of 16 vectors at once: lane k of the result is bit for bit
  // ReduceAdd(acc[k]). GCC's _mm512_reduce_add_ps sums a vector in the
  // tree (i + i+8) for i < 8, then (i + i+4) for i < 4, then (0 + 2) and
  // (1 + 3), then the two; this does the same additions, 16 vectors' worth
  // per instruction, pairing vectors with shuffles. Float addition is
  // commutative, so only which values are added matters, not the operand
  // order. Each level leaves vector m's values in a known place; the input
  // is read in the 4 x 4 transposed order so that the last level lands key
  // k in lane k.
  static constexpr int32_t kReduceBlock = 16;
  [[gnu::always_inline]] static Vec ReduceAdd16(const Vec* acc) {
    // Level 1: x[j] holds (i + i+8) of vectors a and b in lanes 0-7 and
    // 8-15, for the pairs in `order`.
    constexpr int kOrder[16] = {0, 4, 8, 12, 1, 5, 9, 13,
                                2, 6, 10, 14, 3, 7, 11, 15};
    Vec x[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const Vec a = acc[kOrder[2 * j]], b = acc[kOrder[2 * j + 1]];
      x[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44),   // a.lo, b.lo
                           _mm512_shuffle_f32x4(a, b, 0xEE));  // a.hi, b.hi
    }
    // Level 2: (i + i+4); y[m]'s 128-bit block b holds one vector's four.
    Vec y[4];
#pragma GCC unroll 8
    for (int m = 0; m < 4; ++m) {
      const Vec a = x[2 * m], b = x[2 * m + 1];
      y[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88),   // 0, 2 | 0, 2
                           _mm512_shuffle_f32x4(a, b, 0xDD));  // 1, 3 | 1, 3
    }
    // Level 3: (0 + 2) and (1 + 3), within each 128-bit block.
    Vec z[2];
#pragma GCC unroll 8
    for (int n = 0; n < 2; ++n) {
      const Vec a = y[2 * n], b = y[2 * n + 1];
      z[n] = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44),   // a0 a1 b0 b1
                           _mm512_shuffle_ps(a, b, 0xEE));  // a2 a3 b2 b3
    }
    // Level 4: the two halves.
    return _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88),   // 0 2 | 0 2
                         _mm512_shuffle_ps(z[0], z[1], 0xDD));  // 1 3 | 1 3
  }
  [[gnu::always_inline]] static void Store(float* p, Vec v) {
    _mm512_storeu_ps(p, v);
  }
  // sum[k] += lane k, in double, for k < 16 (as sum[k] += ReduceAdd would).
  [[gnu::always_inline]] static void AddToSums(double* sum, Vec v) {
    _mm512_storeu_pd(sum, _mm512_add_pd(_mm512_loadu_pd(sum),
                                        _mm512_cvtps_pd(_mm512_castps512_ps256(v))));
    _mm512_storeu_pd(
        sum + 8,
        _mm512_add_pd(_mm512_loadu_pd(sum + 8),
                      _mm512_cvtps_pd(_mm256_castpd_ps(
                          _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))));
  }
};

// exp(x) for x <= 0 (Cephes expf: Cody-Waite reduction, degree-6 polynomial,
// scaling by 2^n with scalef, which underflows to 0 gracefully).
inline __m512 ExpNonPositive(__m512 x) {
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

}  // namespace

// Every position goes through the same instructions (the tails through
// masked loads and stores, never a scalar std::exp or a separate multiply and
// add), so equal logits get bit-identical attention wherever they sit: the tie
// rule of docs/step-semantics.md section 8 depends on it.
void AccumulateSoftmaxAvx512(float* z, int64_t rows, int64_t n, double weight,
                             double* attention) {
  const int64_t n16 = n - n % 16;
  const __mmask16 tail16 = static_cast<__mmask16>((1u << (n % 16)) - 1);
  const int64_t n8 = n - n % 8;
  const __mmask8 tail8 = static_cast<__mmask8>((1u << (n % 8)) - 1);
  // A constant expression, so that no numeric_limits member is emitted here.
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
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

void ScoreKeysAvx512(const ScoreArgs& args) {
  simd::ScoreKeysForType<Avx512>(args);
}

void SumKeysAvx512(const ScoreArgs& args) {
  simd::SumKeysForType<Avx512>(args);
}

}  // namespace entrokv::internal

#endif  // __x86_64__
