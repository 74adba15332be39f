// Compiled with -ffp-contract=off (core/CMakeLists.txt): a multiply followed
// by an add must stay two roundings in every version, or the vector versions
// would not be bit-identical to the scalar one.

#include "sketch_project.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace entrokv::internal {
namespace {

// One column of one plane, the reference arithmetic.
float Column(const double* p, const float* v, int64_t d, int64_t r,
             int64_t c) {
  double acc = 0.0;
  for (int64_t j = 0; j < d; ++j) {
    acc = acc + p[j * r + c] * static_cast<double>(v[j]);
  }
  return static_cast<float>(acc);
}

}  // namespace

void ProjectScalar(const double* p, const float* v, int64_t planes, int64_t d,
                   int64_t r, float* out) {
  for (int64_t t = 0; t < planes; ++t) {
    for (int64_t c = 0; c < r; ++c) {
      out[t * r + c] = Column(p + t * d * r, v + t * d, d, r, c);
    }
  }
}

#if defined(__x86_64__)
namespace {

// kGroup planes × kVecs vectors of columns [c0, c0 + kVecs·lanes) advance
// together over j: kGroup·kVecs independent sums, enough to hide the add's
// latency. Each sum is one column's reference arithmetic.
template <int kGroup, int kVecs>
__attribute__((target("avx512f"))) void Block512(const double* p,
                                                 const float* v, int64_t d,
                                                 int64_t r, int64_t c0,
                                                 float* out) {
  __m512d acc[kGroup][kVecs];
  for (int g = 0; g < kGroup; ++g) {
    for (int k = 0; k < kVecs; ++k) acc[g][k] = _mm512_setzero_pd();
  }
  for (int64_t j = 0; j < d; ++j) {
    for (int g = 0; g < kGroup; ++g) {
      const __m512d vj =
          _mm512_set1_pd(static_cast<double>(v[g * d + j]));
      const double* row = p + (g * d + j) * r + c0;
      for (int k = 0; k < kVecs; ++k) {
        acc[g][k] = _mm512_add_pd(
            acc[g][k], _mm512_mul_pd(_mm512_loadu_pd(row + 8 * k), vj));
      }
    }
  }
  for (int g = 0; g < kGroup; ++g) {
    for (int k = 0; k < kVecs; ++k) {
      // The masked form: the unmasked one reads an undefined pass-through.
      const __m256 rounded =
          _mm512_mask_cvtpd_ps(_mm256_setzero_ps(), 0xFF, acc[g][k]);
      _mm256_storeu_ps(out + g * r + c0 + 8 * k, rounded);
    }
  }
}

template <int kGroup, int kVecs>
__attribute__((target("avx2"))) void Block256(const double* p, const float* v,
                                              int64_t d, int64_t r, int64_t c0,
                                              float* out) {
  __m256d acc[kGroup][kVecs];
  for (int g = 0; g < kGroup; ++g) {
    for (int k = 0; k < kVecs; ++k) acc[g][k] = _mm256_setzero_pd();
  }
  for (int64_t j = 0; j < d; ++j) {
    for (int g = 0; g < kGroup; ++g) {
      const __m256d vj =
          _mm256_set1_pd(static_cast<double>(v[g * d + j]));
      const double* row = p + (g * d + j) * r + c0;
      for (int k = 0; k < kVecs; ++k) {
        acc[g][k] = _mm256_add_pd(
            acc[g][k], _mm256_mul_pd(_mm256_loadu_pd(row + 4 * k), vj));
      }
    }
  }
  for (int g = 0; g < kGroup; ++g) {
    for (int k = 0; k < kVecs; ++k) {
      _mm_storeu_ps(out + g * r + c0 + 4 * k, _mm256_cvtpd_ps(acc[g][k]));
    }
  }
}

using BlockFn = void (*)(const double*, const float*, int64_t, int64_t,
                         int64_t, float*);

// Block<G, V> for G planes (1..4) and V vectors (1..4).
template <template <int, int> class Pick>
BlockFn Choose(int group, int vecs) {
  static constexpr BlockFn kTable[4][4] = {
      {Pick<1, 1>::kFn, Pick<1, 2>::kFn, Pick<1, 3>::kFn, Pick<1, 4>::kFn},
      {Pick<2, 1>::kFn, Pick<2, 2>::kFn, Pick<2, 3>::kFn, Pick<2, 4>::kFn},
      {Pick<3, 1>::kFn, Pick<3, 2>::kFn, Pick<3, 3>::kFn, Pick<3, 4>::kFn},
      {Pick<4, 1>::kFn, Pick<4, 2>::kFn, Pick<4, 3>::kFn, Pick<4, 4>::kFn}};
  return kTable[group - 1][vecs - 1];
}
template <int G, int V>
struct Pick512 {
  static constexpr BlockFn kFn = &Block512<G, V>;
};
template <int G, int V>
struct Pick256 {
  static constexpr BlockFn kFn = &Block256<G, V>;
};

// Planes in groups of up to 4, columns in blocks of up to 4 vectors of
// `lanes`; the columns past the last whole vector by the reference loop.
template <template <int, int> class Pick>
void ProjectVector(int64_t lanes, const double* p, const float* v,
                   int64_t planes, int64_t d, int64_t r, float* out) {
  const int64_t whole = r / lanes * lanes;
  for (int64_t t0 = 0; t0 < planes; t0 += 4) {
    const int group = static_cast<int>(std::min<int64_t>(4, planes - t0));
    const double* pg = p + t0 * d * r;
    const float* vg = v + t0 * d;
    float* og = out + t0 * r;
    for (int64_t c0 = 0; c0 < whole; c0 += 4 * lanes) {
      const int vecs =
          static_cast<int>(std::min<int64_t>(4, (whole - c0) / lanes));
      Choose<Pick>(group, vecs)(pg, vg, d, r, c0, og);
    }
    for (int g = 0; g < group; ++g) {
      for (int64_t c = whole; c < r; ++c) {
        og[g * r + c] = Column(pg + g * d * r, vg + g * d, d, r, c);
      }
    }
  }
}

}  // namespace

void ProjectAvx2(const double* p, const float* v, int64_t planes, int64_t d,
                 int64_t r, float* out) {
  ProjectVector<Pick256>(4, p, v, planes, d, r, out);
}

void ProjectAvx512(const double* p, const float* v, int64_t planes, int64_t d,
                   int64_t r, float* out) {
  ProjectVector<Pick512>(8, p, v, planes, d, r, out);
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
