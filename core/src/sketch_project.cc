// Compiled with -ffp-contract=off (core/CMakeLists.txt): a multiply followed
// by an add must stay two roundings in every version, or the vector versions
// would not be bit-identical to the scalar one.

#include "sketch_project.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace entrokv::internal {

void ProjectScalar(const double* p, const float* v, int64_t d, int64_t r,
                   float* out) {
  constexpr int64_t kBlock = 64;
  double acc[kBlock];
  for (int64_t c0 = 0; c0 < r; c0 += kBlock) {
    const int64_t m = std::min(kBlock, r - c0);
    for (int64_t c = 0; c < m; ++c) acc[c] = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double vj = v[j];
      const double* row = p + j * r + c0;
      for (int64_t c = 0; c < m; ++c) acc[c] = acc[c] + row[c] * vj;
    }
    for (int64_t c = 0; c < m; ++c) out[c0 + c] = static_cast<float>(acc[c]);
  }
}

#if defined(__x86_64__)

// Columns in blocks of kLanes · kVecs, kVecs accumulators held in registers
// over j; the columns past the last whole vector go through the scalar path's
// arithmetic.
__attribute__((target("avx2"))) void ProjectAvx2(const double* p,
                                                 const float* v, int64_t d,
                                                 int64_t r, float* out) {
  constexpr int64_t kLanes = 4, kVecs = 4;
  const int64_t whole = r / kLanes * kLanes;
  for (int64_t c0 = 0; c0 < whole; c0 += kLanes * kVecs) {
    const int64_t vecs = std::min(kVecs, (whole - c0) / kLanes);
    __m256d acc[kVecs];
    for (int64_t k = 0; k < kVecs; ++k) acc[k] = _mm256_setzero_pd();
    for (int64_t j = 0; j < d; ++j) {
      const __m256d vj = _mm256_set1_pd(static_cast<double>(v[j]));
      const double* row = p + j * r + c0;
      for (int64_t k = 0; k < vecs; ++k) {
        acc[k] = _mm256_add_pd(
            acc[k], _mm256_mul_pd(_mm256_loadu_pd(row + k * kLanes), vj));
      }
    }
    for (int64_t k = 0; k < vecs; ++k) {
      _mm_storeu_ps(out + c0 + k * kLanes, _mm256_cvtpd_ps(acc[k]));
    }
  }
  if (whole < r) {
    // The scalar path on the last columns: P's sub-block with stride r.
    for (int64_t c = whole; c < r; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < d; ++j) {
        acc = acc + p[j * r + c] * static_cast<double>(v[j]);
      }
      out[c] = static_cast<float>(acc);
    }
  }
}

__attribute__((target("avx512f"))) void ProjectAvx512(const double* p,
                                                     const float* v, int64_t d,
                                                     int64_t r, float* out) {
  constexpr int64_t kLanes = 8, kVecs = 4;
  const int64_t whole = r / kLanes * kLanes;
  for (int64_t c0 = 0; c0 < whole; c0 += kLanes * kVecs) {
    const int64_t vecs = std::min(kVecs, (whole - c0) / kLanes);
    __m512d acc[kVecs];
    for (int64_t k = 0; k < kVecs; ++k) acc[k] = _mm512_setzero_pd();
    for (int64_t j = 0; j < d; ++j) {
      const __m512d vj = _mm512_set1_pd(static_cast<double>(v[j]));
      const double* row = p + j * r + c0;
      for (int64_t k = 0; k < vecs; ++k) {
        acc[k] = _mm512_add_pd(
            acc[k], _mm512_mul_pd(_mm512_loadu_pd(row + k * kLanes), vj));
      }
    }
    for (int64_t k = 0; k < vecs; ++k) {
      // The masked form: the unmasked one reads an undefined pass-through.
      const __m256 rounded =
          _mm512_mask_cvtpd_ps(_mm256_setzero_ps(), 0xFF, acc[k]);
      _mm256_storeu_ps(out + c0 + k * kLanes, rounded);
    }
  }
  if (whole < r) {
    for (int64_t c = whole; c < r; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < d; ++j) {
        acc = acc + p[j * r + c] * static_cast<double>(v[j]);
      }
      out[c] = static_cast<float>(acc);
    }
  }
}

#endif  // __x86_64__

ProjectFn BestProject() {
#if defined(__x86_64__)
  static const ProjectFn best = __builtin_cpu_supports("avx512f")
                                    ? &ProjectAvx512
                                    : __builtin_cpu_supports("avx2")
                                          ? &ProjectAvx2
                                          : &ProjectScalar;
  return best;
#else
  return &ProjectScalar;
#endif
}

const char* BestProjectName() {
#if defined(__x86_64__)
  if (BestProject() == &ProjectAvx512) return "avx512";
  if (BestProject() == &ProjectAvx2) return "avx2";
#endif
  return "scalar";
}

}  // namespace entrokv::internal
