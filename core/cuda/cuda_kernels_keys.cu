// Device kernels of the CUDA backend for the rankings that read the stored
// keys beyond z (docs/step-semantics.md section 3): keydiff's cosine to the
// live keys' mean direction, rkv's redundancy, and the variance term of
// expected's logits.
//
// The CPU backend computes them in double (core/src/key_stats.cc); these
// kernels do the same operations in the same order with the round-to-nearest
// intrinsics (no contraction into FMA), so that keydiff's scores and the
// variance term are bit-identical to the CPU's (rkv's up to exp's last
// place). The μ term of expected's
// logits comes from LaunchScore and agrees to float rounding.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_kernels.h"
#include "cuda_kernels_common.cuh"

namespace entrokv::internal::cuda {
namespace {

__device__ __forceinline__ const std::byte* KeyRow(const std::byte* keys,
                                                   ElementType type,
                                                   int64_t capacity,
                                                   int32_t dim, int64_t plane,
                                                   int64_t pos) {
  const int64_t esize = type == ElementType::kF32 ? 4 : 2;
  return keys + (plane * capacity + pos) * int64_t{dim} * esize;
}

// inv_norm[plane·live + p] = 1/‖k‖ (0 for a zero key).
__global__ void __launch_bounds__(kThreads) InvNormKernel(KeyDiffArgs a) {
  const int64_t items = int64_t{a.planes} * a.live;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < items;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t plane = i / a.live;
    const int64_t p = i % a.live;
    const std::byte* row = KeyRow(a.keys, a.type, a.capacity, a.dim, plane, p);
    double sq = 0.0;
    for (int32_t j = 0; j < a.dim; ++j) {
      const double x = LoadElementAny(a.type, row, j);
      sq = __dadd_rn(sq, __dmul_rn(x, x));
    }
    const double norm = sqrt(sq);
    a.inv_norm[i] = norm > 0.0 ? __ddiv_rn(1.0, norm) : 0.0;
  }
}

// anchor[plane·dim + j] = (Σ_p k[p, j]·inv_norm[p]) / live, p ascending.
__global__ void __launch_bounds__(kThreads) AnchorKernel(KeyDiffArgs a) {
  const int64_t items = int64_t{a.planes} * a.dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < items;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t plane = i / a.dim;
    const int32_t j = static_cast<int32_t>(i % a.dim);
    double s = 0.0;
    for (int64_t p = 0; p < a.live; ++p) {
      const double x = LoadElementAny(
          a.type, KeyRow(a.keys, a.type, a.capacity, a.dim, plane, p), j);
      s = __dadd_rn(s, __dmul_rn(x, a.inv_norm[plane * a.live + p]));
    }
    a.anchor[i] = __ddiv_rn(s, static_cast<double>(a.live));
  }
}

// anchor_norm[plane] = ‖anchor[plane]‖, j ascending.
__global__ void AnchorNormKernel(KeyDiffArgs a) {
  for (int64_t plane = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       plane < a.planes; plane += int64_t{gridDim.x} * blockDim.x) {
    double sq = 0.0;
    for (int32_t j = 0; j < a.dim; ++j) {
      const double v = a.anchor[plane * a.dim + j];
      sq = __dadd_rn(sq, __dmul_rn(v, v));
    }
    a.anchor_norm[plane] = sqrt(sq);
  }
}

// out[p] = −(Σ_planes cos(k_p, anchor)) / planes, planes ascending.
__global__ void __launch_bounds__(kThreads) KeyDiffKernel(KeyDiffArgs a) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < a.live;
       p += int64_t{gridDim.x} * blockDim.x) {
    double out = 0.0;
    for (int64_t plane = 0; plane < a.planes; ++plane) {
      const double anchor_norm = a.anchor_norm[plane];
      const double inv = a.inv_norm[plane * a.live + p];
      if (anchor_norm == 0.0 || inv == 0.0) continue;
      const std::byte* row =
          KeyRow(a.keys, a.type, a.capacity, a.dim, plane, p);
      double dot = 0.0;
      for (int32_t j = 0; j < a.dim; ++j) {
        const double x = LoadElementAny(a.type, row, j);
        dot = __dadd_rn(dot, __dmul_rn(x, a.anchor[plane * a.dim + j]));
      }
      out = __dsub_rn(out, __ddiv_rn(__dmul_rn(dot, inv), anchor_norm));
    }
    a.out[p] = __ddiv_rn(out, static_cast<double>(a.planes));
  }
}

// The cosine of rows `i` and `p` of one plane, as the CPU computes it:
// (Σ_j k_i[j]·k_p[j])·inv_i·inv_p; 0 for p = i.
__device__ double RowCosine(const RedundancyArgs& a, int64_t plane, int64_t i,
                            int64_t p) {
  if (p == i) return 0.0;
  const std::byte* ki = KeyRow(a.keys, a.type, a.capacity, a.dim, plane, i);
  const std::byte* kp = KeyRow(a.keys, a.type, a.capacity, a.dim, plane, p);
  double dot = 0.0;
  for (int32_t j = 0; j < a.dim; ++j) {
    dot = __dadd_rn(dot, __dmul_rn(LoadElementAny(a.type, ki, j),
                                   LoadElementAny(a.type, kp, j)));
  }
  return __dmul_rn(__dmul_rn(dot, a.inv_norm[plane * a.live + i]),
                   a.inv_norm[plane * a.live + p]);
}

// retain[plane·row_count + t]: the position of reference row t's most recent
// duplicate (cosine > 0.5, largest append index), or -1.
__global__ void __launch_bounds__(kThreads) RetainKernel(RedundancyArgs a) {
  const int64_t items = int64_t{a.planes} * a.row_count;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < items;
       u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t plane = u / a.row_count;
    const int64_t i = a.rows[u % a.row_count];
    int64_t retain = -1;
    for (int64_t p = 0; p < a.live; ++p) {
      if (RowCosine(a, plane, i, p) > 0.5 &&
          (retain < 0 || a.index[p] > a.index[retain])) {
        retain = p;
      }
    }
    a.retain[u] = static_cast<int32_t>(retain);
  }
}

// r[plane·live + p] = (Σ_t S_tp) / row_count, t ascending.
__global__ void __launch_bounds__(kThreads) RowMeanKernel(RedundancyArgs a) {
  const int64_t items = int64_t{a.planes} * a.live;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < items;
       u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t plane = u / a.live;
    const int64_t p = u % a.live;
    double r = 0.0;
    for (int32_t t = 0; t < a.row_count; ++t) {
      const double c = a.retain[plane * a.row_count + t] == p
                           ? 0.0
                           : RowCosine(a, plane, a.rows[t], p);
      r = __dadd_rn(r, c);
    }
    a.r[u] = __ddiv_rn(r, static_cast<double>(a.row_count));
  }
}

// stats[2·plane] = max_p r, stats[2·plane + 1] = Σ_p exp(r − max), p
// ascending; one thread per plane, for the CPU's order.
__global__ void SoftmaxStatsKernel(RedundancyArgs a) {
  for (int64_t plane = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       plane < a.planes; plane += int64_t{gridDim.x} * blockDim.x) {
    const double* r = a.r + plane * a.live;
    double max = -HUGE_VAL;
    for (int64_t p = 0; p < a.live; ++p) max = fmax(max, r[p]);
    double sum = 0.0;
    for (int64_t p = 0; p < a.live; ++p) sum = __dadd_rn(sum, exp(r[p] - max));
    a.stats[2 * plane] = max;
    a.stats[2 * plane + 1] = sum;
  }
}

// out[p] = (Σ_planes exp(r − max) / sum) / planes, planes ascending.
__global__ void __launch_bounds__(kThreads)
    RedundancyOutKernel(RedundancyArgs a) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < a.live;
       p += int64_t{gridDim.x} * blockDim.x) {
    double out = 0.0;
    for (int64_t plane = 0; plane < a.planes; ++plane) {
      const double e = exp(a.r[plane * a.live + p] - a.stats[2 * plane]);
      out = __dadd_rn(out, __ddiv_rn(e, a.stats[2 * plane + 1]));
    }
    a.out[p] = __ddiv_rn(out, static_cast<double>(a.planes));
  }
}

// z[r·live + p] += Σ_j var[r, j]·k[p, j]² / (2·head_dim) for the q heads r
// of each plane's kv head; one thread per (plane, p).
__global__ void __launch_bounds__(kThreads)
    VarianceTermKernel(VarianceTermArgs a) {
  const int64_t planes = int64_t{a.layers} * a.kv_heads;
  const int64_t items = planes * a.live;
  const double inv = __ddiv_rn(1.0, 2.0 * a.head_dim);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < items;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t plane = i / a.live;
    const int64_t p = i % a.live;
    const std::byte* row = KeyRow(a.keys, a.type, a.capacity, a.dim, plane, p);
    for (int32_t g = 0; g < a.group; ++g) {
      const int64_t r = plane * a.group + g;
      const double* v = a.var + r * a.dim;
      double term = 0.0;
      for (int32_t j = 0; j < a.dim; ++j) {
        const double x = LoadElementAny(a.type, row, j);
        term = __dadd_rn(term, __dmul_rn(v[j], __dmul_rn(x, x)));
      }
      float* z = a.z + r * a.live + p;
      *z = __double2float_rn(
          __dadd_rn(static_cast<double>(*z), __dmul_rn(term, inv)));
    }
  }
}

}  // namespace

cudaError_t LaunchKeyDiff(const KeyDiffArgs& a, cudaStream_t stream) {
  if (a.live <= 0) return cudaSuccess;
  const int64_t per_plane = int64_t{a.planes} * a.live;
  InvNormKernel<<<GridFor(per_plane, kThreads), kThreads, 0, stream>>>(a);
  AnchorKernel<<<GridFor(int64_t{a.planes} * a.dim, kThreads), kThreads, 0,
                 stream>>>(a);
  AnchorNormKernel<<<GridFor(a.planes, kThreads), kThreads, 0, stream>>>(a);
  KeyDiffKernel<<<GridFor(a.live, kThreads), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchRedundancy(const RedundancyArgs& a, cudaStream_t stream) {
  if (a.live <= 0 || a.row_count <= 0) return cudaSuccess;
  // InvNormKernel reads only the norms' inputs and inv_norm.
  KeyDiffArgs norms{.type = a.type,
                    .keys = a.keys,
                    .capacity = a.capacity,
                    .planes = a.planes,
                    .dim = a.dim,
                    .live = a.live,
                    .inv_norm = a.inv_norm,
                    .anchor = nullptr,
                    .anchor_norm = nullptr,
                    .out = nullptr};
  const int64_t per_plane = int64_t{a.planes} * a.live;
  InvNormKernel<<<GridFor(per_plane, kThreads), kThreads, 0, stream>>>(norms);
  RetainKernel<<<GridFor(int64_t{a.planes} * a.row_count, kThreads), kThreads,
                 0, stream>>>(a);
  RowMeanKernel<<<GridFor(per_plane, kThreads), kThreads, 0, stream>>>(a);
  SoftmaxStatsKernel<<<GridFor(a.planes, kThreads), kThreads, 0, stream>>>(a);
  RedundancyOutKernel<<<GridFor(a.live, kThreads), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchVarianceTerm(const VarianceTermArgs& a,
                               cudaStream_t stream) {
  if (a.live <= 0) return cudaSuccess;
  const int64_t items = int64_t{a.layers} * a.kv_heads * a.live;
  VarianceTermKernel<<<GridFor(items, kThreads), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace entrokv::internal::cuda
