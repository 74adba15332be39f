// Compiled with -ffp-contract=off (core/CMakeLists.txt): a multiply followed
// by an add must stay two roundings in every version, or the vector versions
// would not be bit-identical to the scalar one.

#include "sketch_project.h"

#include <algorithm>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace entrokv::internal {
namespace {

// One column of one plane, the reference arithmetic.
template <typename V>
float Column(const double* p, const V* v, int64_t d, int64_t r, int64_t c) {
  double acc = 0.0;
  for (int64_t j = 0; j < d; ++j) {
    acc = acc + p[j * r + c] * static_cast<double>(v[j]);
  }
  return static_cast<float>(acc);
}

template <typename V>
void ProjectScalarT(const double* p, const V* v, int64_t tokens, int64_t planes,
                    int64_t d, int64_t r, float* out) {
  for (int64_t e = 0; e < tokens; ++e) {
    for (int64_t t = 0; t < planes; ++t) {
      for (int64_t c = 0; c < r; ++c) {
        out[(e * planes + t) * r + c] =
            Column(p + t * d * r, v + (e * planes + t) * d, d, r, c);
      }
    }
  }
}

}  // namespace

void ProjectScalar(const double* p, const float* v, int64_t tokens,
                   int64_t planes, int64_t d, int64_t r, float* out) {
  ProjectScalarT(p, v, tokens, planes, d, r, out);
}

void ProjectScalar(const double* p, const double* v, int64_t tokens,
                   int64_t planes, int64_t d, int64_t r, float* out) {
  ProjectScalarT(p, v, tokens, planes, d, r, out);
}

void SumGroupsScalar(const float* q, int64_t vectors, int64_t group, int64_t d,
                     double* out) {
  for (int64_t i = 0; i < vectors; ++i) {
    double* dst = out + i * d;
    for (int64_t j = 0; j < d; ++j) dst[j] = 0.0;
    for (int64_t h = 0; h < group; ++h) {
      const float* src = q + (i * group + h) * d;
      for (int64_t j = 0; j < d; ++j) {
        dst[j] = dst[j] + static_cast<double>(src[j]);
      }
    }
  }
}

#if defined(__x86_64__)
namespace {

// kRows rows (tokens of one plane) × kVecs vectors of columns
// [c0, c0 + kVecs·lanes) advance together over j: each row of the plane's
// matrix P is loaded once for all kRows tokens. Row g reads its vector at
// v + g·v_stride and writes at out + g·out_stride. Each sum is one column's
// reference arithmetic.
template <typename V>
struct Rows {
  const double* p;
  const V* v;
  int64_t v_stride;
  float* out;
  int64_t out_stride;
};

template <int kRows, int kVecs, typename V>
__attribute__((target("avx512f"))) void Block512(const Rows<V>& a, int64_t d,
                                                 int64_t r, int64_t c0) {
  __m512d acc[kRows][kVecs];
#pragma GCC unroll 8
  for (int g = 0; g < kRows; ++g) {
#pragma GCC unroll 8
    for (int k = 0; k < kVecs; ++k) acc[g][k] = _mm512_setzero_pd();
  }
  // Every loop over g and k is unrolled, so that acc stays in registers
  // (GCC -O2 left a loop over k rolled, with acc on the stack: the adds then
  // chained through memory, about twice as slow; docs/performance.md).
  for (int64_t j = 0; j < d; ++j) {
    __m512d pj[kVecs];
#pragma GCC unroll 8
    for (int k = 0; k < kVecs; ++k) {
      pj[k] = _mm512_loadu_pd(a.p + j * r + c0 + 8 * k);
    }
#pragma GCC unroll 8
    for (int g = 0; g < kRows; ++g) {
      const __m512d vj =
          _mm512_set1_pd(static_cast<double>(a.v[g * a.v_stride + j]));
#pragma GCC unroll 8
      for (int k = 0; k < kVecs; ++k) {
        acc[g][k] = _mm512_add_pd(acc[g][k], _mm512_mul_pd(pj[k], vj));
      }
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < kRows; ++g) {
#pragma GCC unroll 8
    for (int k = 0; k < kVecs; ++k) {
      // The masked form: the unmasked one reads an undefined pass-through.
      const __m256 rounded =
          _mm512_mask_cvtpd_ps(_mm256_setzero_ps(), 0xFF, acc[g][k]);
      _mm256_storeu_ps(a.out + g * a.out_stride + c0 + 8 * k, rounded);
    }
  }
}

template <int kRows, int kVecs, typename V>
__attribute__((target("avx2"))) void Block256(const Rows<V>& a, int64_t d,
                                              int64_t r, int64_t c0) {
  __m256d acc[kRows][kVecs];
#pragma GCC unroll 8
  for (int g = 0; g < kRows; ++g) {
#pragma GCC unroll 8
    for (int k = 0; k < kVecs; ++k) acc[g][k] = _mm256_setzero_pd();
  }
  for (int64_t j = 0; j < d; ++j) {
    __m256d pj[kVecs];
#pragma GCC unroll 8
    for (int k = 0; k < kVecs; ++k) {
      pj[k] = _mm256_loadu_pd(a.p + j * r + c0 + 4 * k);
    }
#pragma GCC unroll 8
    for (int g = 0; g < kRows; ++g) {
      const __m256d vj =
          _mm256_set1_pd(static_cast<double>(a.v[g * a.v_stride + j]));
#pragma GCC unroll 8
      for (int k = 0; k < kVecs; ++k) {
        acc[g][k] = _mm256_add_pd(acc[g][k], _mm256_mul_pd(pj[k], vj));
      }
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < kRows; ++g) {
#pragma GCC unroll 8
    for (int k = 0; k < kVecs; ++k) {
      _mm_storeu_ps(a.out + g * a.out_stride + c0 + 4 * k,
                    _mm256_cvtpd_ps(acc[g][k]));
    }
  }
}

template <typename V>
using BlockFn = void (*)(const Rows<V>&, int64_t, int64_t, int64_t);

// Block<G, K, V> for G rows (1..kMaxRows) and K vectors (1..4).
constexpr int kMaxRows = 4;
template <template <int, int> class Pick, typename V, int... kG>
BlockFn<V> ChooseIn(std::integer_sequence<int, kG...>, int rows, int vecs) {
  static constexpr BlockFn<V> kTable[][4] = {
      {Pick<kG + 1, 1>::kFn, Pick<kG + 1, 2>::kFn, Pick<kG + 1, 3>::kFn,
       Pick<kG + 1, 4>::kFn}...};
  return kTable[rows - 1][vecs - 1];
}
template <template <int, int> class Pick, typename V>
BlockFn<V> Choose(int rows, int vecs) {
  return ChooseIn<Pick, V>(std::make_integer_sequence<int, kMaxRows>(), rows,
                           vecs);
}
template <typename V>
struct Isa512 {
  template <int G, int K>
  struct Pick {
    static constexpr BlockFn<V> kFn = &Block512<G, K, V>;
  };
};
template <typename V>
struct Isa256 {
  template <int G, int K>
  struct Pick {
    static constexpr BlockFn<V> kFn = &Block256<G, K, V>;
  };
};

// Up to kMaxRows rows (`a`) over every column: blocks of up to 4 vectors of
// `lanes`, the columns past the last whole vector by the reference loop.
template <template <int, int> class Pick, typename V>
void ProjectRows(int64_t lanes, const Rows<V>& a, int rows, int64_t d,
                 int64_t r) {
  const int64_t whole = r / lanes * lanes;
  for (int64_t c0 = 0; c0 < whole; c0 += 4 * lanes) {
    const int vecs =
        static_cast<int>(std::min<int64_t>(4, (whole - c0) / lanes));
    Choose<Pick, V>(rows, vecs)(a, d, r, c0);
  }
  for (int g = 0; g < rows; ++g) {
    for (int64_t c = whole; c < r; ++c) {
      a.out[g * a.out_stride + c] = Column(a.p, a.v + g * a.v_stride, d, r, c);
    }
  }
}

// Plane by plane, its tokens in groups of up to kMaxRows sharing each row of
// the plane's matrix, which stays in L1 meanwhile. One token is one row: its
// planes one after another rather than interleaved, which measured faster
// (one stream of P from L2 at a time; docs/performance.md).
template <template <int, int> class Pick, typename V>
void ProjectVector(int64_t lanes, const double* p, const V* v, int64_t tokens,
                   int64_t planes, int64_t d, int64_t r, float* out) {
  for (int64_t t = 0; t < planes; ++t) {
    for (int64_t e0 = 0; e0 < tokens; e0 += kMaxRows) {
      const int rows =
          static_cast<int>(std::min<int64_t>(kMaxRows, tokens - e0));
      ProjectRows<Pick, V>(lanes,
                           {.p = p + t * d * r,
                            .v = v + (e0 * planes + t) * d,
                            .v_stride = planes * d,
                            .out = out + (e0 * planes + t) * r,
                            .out_stride = planes * r},
                           rows, d, r);
    }
  }
}

}  // namespace

void ProjectAvx2(const double* p, const float* v, int64_t tokens,
                 int64_t planes, int64_t d, int64_t r, float* out) {
  ProjectVector<Isa256<float>::Pick>(4, p, v, tokens, planes, d, r, out);
}

void ProjectAvx2(const double* p, const double* v, int64_t tokens,
                 int64_t planes, int64_t d, int64_t r, float* out) {
  ProjectVector<Isa256<double>::Pick>(4, p, v, tokens, planes, d, r, out);
}

void ProjectAvx512(const double* p, const float* v, int64_t tokens,
                   int64_t planes, int64_t d, int64_t r, float* out) {
  ProjectVector<Isa512<float>::Pick>(8, p, v, tokens, planes, d, r, out);
}

void ProjectAvx512(const double* p, const double* v, int64_t tokens,
                   int64_t planes, int64_t d, int64_t r, float* out) {
  ProjectVector<Isa512<double>::Pick>(8, p, v, tokens, planes, d, r, out);
}

__attribute__((target("avx2"))) void SumGroupsAvx2(const float* q,
                                                   int64_t vectors,
                                                   int64_t group, int64_t d,
                                                   double* out) {
  const int64_t whole = d / 4 * 4;
  for (int64_t i = 0; i < vectors; ++i) {
    const float* src = q + i * group * d;
    double* dst = out + i * d;
    for (int64_t j = 0; j < whole; j += 4) {
      __m256d acc = _mm256_setzero_pd();
      for (int64_t h = 0; h < group; ++h) {
        acc =
            _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_loadu_ps(src + h * d + j)));
      }
      _mm256_storeu_pd(dst + j, acc);
    }
    for (int64_t j = whole; j < d; ++j) {
      double acc = 0.0;
      for (int64_t h = 0; h < group; ++h) {
        acc = acc + static_cast<double>(src[h * d + j]);
      }
      dst[j] = acc;
    }
  }
}

#endif  // __x86_64__

namespace {

enum class Isa { kScalar, kAvx2, kAvx512 };

Isa BestIsa() {
#if defined(__x86_64__)
  static const Isa best = __builtin_cpu_supports("avx512f") ? Isa::kAvx512
                          : __builtin_cpu_supports("avx2")  ? Isa::kAvx2
                                                            : Isa::kScalar;
  return best;
#else
  return Isa::kScalar;
#endif
}

// The version of either form (Fn: ProjectFn or ProjectSumsFn) for BestIsa().
template <typename Fn>
Fn Best() {
  switch (BestIsa()) {
#if defined(__x86_64__)
    case Isa::kAvx512:
      return static_cast<Fn>(&ProjectAvx512);
    case Isa::kAvx2:
      return static_cast<Fn>(&ProjectAvx2);
#endif
    default:
      return static_cast<Fn>(&ProjectScalar);
  }
}

}  // namespace

ProjectFn BestProject() { return Best<ProjectFn>(); }
ProjectSumsFn BestProjectSums() { return Best<ProjectSumsFn>(); }

SumGroupsFn BestSumGroups() {
#if defined(__x86_64__)
  if (BestIsa() != Isa::kScalar) return &SumGroupsAvx2;
#endif
  return &SumGroupsScalar;
}

const char* BestProjectName() {
  switch (BestIsa()) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

}  // namespace entrokv::internal
