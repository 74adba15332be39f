// The sketcher's projection of entries' keys: for each token and plane
// (layer, kv head) t, out[t] = float(P[t]ᵀ v[t]) with P[t] a d × r row-major
// double matrix (core/include/entrokv/core/sketch.h). A scalar version (token
// by token) and, on x86-64, AVX2 and AVX-512 versions, vectorised across the
// r columns, which go plane by plane and take a plane's tokens four at a
// time, sharing each row of P, so that a plane's matrix is read from memory
// once per call rather than once per token. Every version computes each
// column as the same double operations in the same order (acc = 0; for j
// ascending: acc = acc + P[j][c]·v[j], a multiply then an add, never fused;
// then rounded to float), so all are bit-identical. Pure functions,
// thread-safe.

#ifndef ENTROKV_CORE_SRC_SKETCH_PROJECT_H_
#define ENTROKV_CORE_SRC_SKETCH_PROJECT_H_

#include <cstdint>

namespace entrokv::internal {

// p: planes × d × r doubles; v: tokens × planes × d floats (keys) or doubles
// (the sketcher's query sums); out: tokens × planes × r floats.
using ProjectFn = void (*)(const double* p, const float* v, int64_t tokens,
                           int64_t planes, int64_t d, int64_t r, float* out);
using ProjectSumsFn = void (*)(const double* p, const double* v, int64_t tokens,
                               int64_t planes, int64_t d, int64_t r,
                               float* out);

void ProjectScalar(const double* p, const float* v, int64_t tokens,
                   int64_t planes, int64_t d, int64_t r, float* out);
void ProjectScalar(const double* p, const double* v, int64_t tokens,
                   int64_t planes, int64_t d, int64_t r, float* out);

#if defined(__x86_64__)
// REQUIRES: the CPU has AVX2 (resp. AVX-512F).
void ProjectAvx2(const double* p, const float* v, int64_t tokens,
                 int64_t planes, int64_t d, int64_t r, float* out);
void ProjectAvx2(const double* p, const double* v, int64_t tokens,
                 int64_t planes, int64_t d, int64_t r, float* out);
void ProjectAvx512(const double* p, const float* v, int64_t tokens,
                   int64_t planes, int64_t d, int64_t r, float* out);
void ProjectAvx512(const double* p, const double* v, int64_t tokens,
                   int64_t planes, int64_t d, int64_t r, float* out);
#endif

// The sketcher's group sums: out[i·d + j] = Σ_{h < group} double(q[(i·group
// + h)·d + j]) for i < vectors, each summed from 0.0 in h order (so -0 sums
// to +0). The AVX2 version takes four j at a time, the same operations per
// element, so it is bit-identical to the scalar one.
using SumGroupsFn = void (*)(const float* q, int64_t vectors, int64_t group,
                             int64_t d, double* out);
void SumGroupsScalar(const float* q, int64_t vectors, int64_t group, int64_t d,
                     double* out);
#if defined(__x86_64__)
// REQUIRES: the CPU has AVX2.
void SumGroupsAvx2(const float* q, int64_t vectors, int64_t group, int64_t d,
                   double* out);
#endif

// The fastest version this CPU runs, of each form, and the projections' name
// ("avx512", "avx2", "scalar").
ProjectFn BestProject();
ProjectSumsFn BestProjectSums();
SumGroupsFn BestSumGroups();
const char* BestProjectName();

}  // namespace entrokv::internal

#endif  // ENTROKV_CORE_SRC_SKETCH_PROJECT_H_
