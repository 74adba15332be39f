// Device kernels of the CUDA backend that score the live keys: z for every
// (row, position) and the per-row softmax statistics (see cuda_kernels.h and
// docs/cuda.md).
//
// Every kernel is a grid-stride loop over its items, so any item count fits
// any grid. Arithmetic that the CPU backend does in double is done in double
// here, in the same order where bit-identity matters (key norms); where the
// CPU's order is not reproducible (dot products, block sums) results agree to
// float rounding.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_kernels.h"
#include "cuda_kernels_common.cuh"

namespace entrokv::internal::cuda {
namespace {

// ---- Block reductions (blockDim.x == kThreads) --------------------------

__device__ float BlockMax(float v, float* shared) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
  }
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = shared[0];
    for (int i = 1; i < kWarps; ++i) m = fmaxf(m, shared[i]);
    shared[0] = m;
  }
  __syncthreads();
  const float result = shared[0];
  __syncthreads();
  return result;
}

__device__ double BlockSum(double v, double* shared) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    v += __shfl_xor_sync(kFullMask, v, off);
  }
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = shared[0];
    for (int i = 1; i < kWarps; ++i) s += shared[i];
    shared[0] = s;
  }
  __syncthreads();
  const double result = shared[0];
  __syncthreads();
  return result;
}

// ---- Scores --------------------------------------------------------------

// The vectorised scoring kernel. Each key row is `lanes` 16-byte vectors
// (lanes a power of two, <= 32); a warp scores 32 / lanes entries at a time,
// each lane holding the same slice of every query of the group in registers.
// REQUIRES: group <= kMaxGroup.
template <ElementType kType, int kMaxGroup>
__global__ void __launch_bounds__(kThreads)
    ScoreFastKernel(ScoreArgs a, int lanes, int64_t chunks_per_plane,
                    int64_t entries_per_chunk) {
  constexpr int kE = kElementsPer16Bytes<kType>;
  constexpr int kUnroll = 4;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int c = lane & (lanes - 1);  // Slice of the row this lane reads.
  const int sub = lane / lanes;      // Entry of the warp's group of entries.
  const int entries_per_warp = 32 / lanes;
  const int64_t stride = int64_t{kWarps} * entries_per_warp;
  const int32_t q_heads = a.kv_heads * a.group;
  const int64_t planes = int64_t{a.layers} * a.kv_heads;
  const int64_t items = planes * chunks_per_plane;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const int64_t plane = w / chunks_per_plane;
    const int64_t chunk = w % chunks_per_plane;
    const int64_t layer = plane / a.kv_heads;
    const int64_t kv = plane % a.kv_heads;
    const int64_t row0 = layer * q_heads + kv * a.group;  // First z row.
    float q[kMaxGroup][kE];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        q[g][e] = g < a.group ? a.queries[(row0 + g) * a.head_dim + c * kE + e]
                              : 0.0f;
      }
    }
    const uint4* base = reinterpret_cast<const uint4*>(
        a.keys + plane * a.capacity * (int64_t{lanes} * 16));
    const int64_t begin = chunk * entries_per_chunk;
    const int64_t end = min(a.live, begin + entries_per_chunk);
    // The loop bound depends on the warp only, so every lane reaches the
    // shuffles below.
    for (int64_t pw = begin + int64_t{warp} * entries_per_warp; pw < end;
         pw += stride * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t p = pw + u * stride + sub;
        v[u] = p < end ? __ldcs(base + p * lanes + c) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t p = pw + u * stride + sub;
        float k[kE];
        Decode16<kType>(v[u], k);
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g < a.group) {  // Uniform across the warp.
            float acc = 0.0f;
#pragma unroll
            for (int e = 0; e < kE; ++e) acc = fmaf(q[g][e], k[e], acc);
            for (int off = lanes >> 1; off > 0; off >>= 1) {
              acc += __shfl_xor_sync(kFullMask, acc, off);
            }
            if (c == 0 && p < end) a.z[(row0 + g) * a.live + p] = acc;
          }
        }
      }
    }
  }
}

// Any shape: one warp per (plane, entry), lanes striding over head_dim. The
// key row is re-read (from L1) for each head of the group.
template <ElementType kType>
__global__ void __launch_bounds__(kThreads) ScoreGenericKernel(ScoreArgs a) {
  constexpr int64_t esize = kType == ElementType::kF32 ? 4 : 2;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kWarps;
  const int32_t q_heads = a.kv_heads * a.group;
  const int64_t items = int64_t{a.layers} * a.kv_heads * a.live;
  for (int64_t item = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
       item < items; item += warps) {
    const int64_t plane = item / a.live;
    const int64_t p = item % a.live;
    const int64_t layer = plane / a.kv_heads;
    const int64_t kv = plane % a.kv_heads;
    const int64_t row0 = layer * q_heads + kv * a.group;
    const std::byte* key =
        a.keys + (plane * a.capacity + p) * int64_t{a.head_dim} * esize;
    for (int32_t g = 0; g < a.group; ++g) {
      const float* q = a.queries + (row0 + g) * a.head_dim;
      float acc = 0.0f;
      for (int32_t j = lane; j < a.head_dim; j += 32) {
        acc = fmaf(q[j], LoadElement<kType>(key, j), acc);
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        acc += __shfl_xor_sync(kFullMask, acc, off);
      }
      if (lane == 0) a.z[(row0 + g) * a.live + p] = acc;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    RowStatsKernel(const float* z, int64_t rows, int64_t live, double inv_rows,
                   float* row_max, double* row_inv) {
  __shared__ float shared_max[kWarps];
  __shared__ double shared_sum[kWarps];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* zr = z + r * live;
    float m = -INFINITY;
    for (int64_t p = threadIdx.x; p < live; p += kThreads) m = fmaxf(m, zr[p]);
    m = BlockMax(m, shared_max);
    double s = 0.0;
    for (int64_t p = threadIdx.x; p < live; p += kThreads) {
      s += static_cast<double>(expf(zr[p] - m));
    }
    s = BlockSum(s, shared_sum);
    if (threadIdx.x == 0) {
      row_max[r] = m;
      row_inv[r] = inv_rows / s;
    }
  }
}

int LanesPerRow(ElementType type, int32_t head_dim) {
  const int64_t row_bytes =
      int64_t{head_dim} * (type == ElementType::kF32 ? 4 : 2);
  if (row_bytes % 16 != 0) return 0;
  const int64_t lanes = row_bytes / 16;
  if (lanes > 32 || (lanes & (lanes - 1)) != 0) return 0;
  return static_cast<int>(lanes);
}

template <ElementType kType>
cudaError_t LaunchScoreTyped(const ScoreArgs& a, cudaStream_t stream) {
  const int lanes = LanesPerRow(a.type, a.head_dim);
  const int64_t planes = int64_t{a.layers} * a.kv_heads;
  if (lanes > 0 && a.group <= 8) {
    // A chunk is 4 unrolled passes of the block, 4 times over, so that each
    // thread amortises its query registers over 16 entries.
    const int64_t entries_per_chunk = int64_t{kWarps} * (32 / lanes) * 16;
    const int64_t chunks = (a.live + entries_per_chunk - 1) / entries_per_chunk;
    const unsigned grid = GridFor(planes * chunks, 1);
    if (a.group <= 4) {
      ScoreFastKernel<kType, 4>
          <<<grid, kThreads, 0, stream>>>(a, lanes, chunks, entries_per_chunk);
    } else {
      ScoreFastKernel<kType, 8>
          <<<grid, kThreads, 0, stream>>>(a, lanes, chunks, entries_per_chunk);
    }
  } else {
    ScoreGenericKernel<kType>
        <<<GridFor(planes * a.live, kWarps), kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

bool ScoreUsesFastPath(ElementType type, int32_t head_dim, int32_t group) {
  return LanesPerRow(type, head_dim) > 0 && group <= 8;
}

cudaError_t LaunchScore(const ScoreArgs& a, cudaStream_t stream) {
  if (a.live <= 0) return cudaSuccess;
  switch (a.type) {
    case ElementType::kF32:
      return LaunchScoreTyped<ElementType::kF32>(a, stream);
    case ElementType::kF16:
      return LaunchScoreTyped<ElementType::kF16>(a, stream);
    case ElementType::kBf16:
      return LaunchScoreTyped<ElementType::kBf16>(a, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchRowStats(const float* z, int64_t rows, int64_t live,
                           double inv_rows, float* row_max, double* row_inv,
                           cudaStream_t stream) {
  if (rows <= 0 || live <= 0) return cudaSuccess;
  RowStatsKernel<<<GridFor(rows, 1), kThreads, 0, stream>>>(
      z, rows, live, inv_rows, row_max, row_inv);
  return cudaGetLastError();
}

}  // namespace entrokv::internal::cuda
