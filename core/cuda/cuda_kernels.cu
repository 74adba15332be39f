// Device kernels of the CUDA backend (see cuda_kernels.h and docs/cuda.md).
//
// Every kernel is a grid-stride loop over its items, so any item count fits
// any grid. Arithmetic that the CPU backend does in double is done in double
// here, in the same order where bit-identity matters (key norms); where the
// CPU's order is not reproducible (dot products, block sums) results agree to
// float rounding.

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cuda/std/tuple>

#include "cuda_kernels.h"

namespace entrokv::internal::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr uint64_t kExcluded = ~uint64_t{0};
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

unsigned GridFor(int64_t items, int64_t per_block) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

// ---- Element decoding ----------------------------------------------------

__device__ __forceinline__ float F16BitsToFloat(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}
__device__ __forceinline__ float Bf16BitsToFloat(uint32_t bits) {
  return __uint_as_float(bits << 16);
}

template <ElementType kType>
__device__ __forceinline__ float LoadElement(const std::byte* base, int64_t i) {
  if constexpr (kType == ElementType::kF32) {
    return reinterpret_cast<const float*>(base)[i];
  } else if constexpr (kType == ElementType::kF16) {
    return F16BitsToFloat(reinterpret_cast<const uint16_t*>(base)[i]);
  } else {
    return Bf16BitsToFloat(reinterpret_cast<const uint16_t*>(base)[i]);
  }
}

__device__ __forceinline__ float LoadElementAny(ElementType type,
                                                const std::byte* base,
                                                int64_t i) {
  switch (type) {
    case ElementType::kF32:
      return LoadElement<ElementType::kF32>(base, i);
    case ElementType::kF16:
      return LoadElement<ElementType::kF16>(base, i);
    case ElementType::kBf16:
      return LoadElement<ElementType::kBf16>(base, i);
  }
  return 0.0f;
}

template <ElementType kType>
constexpr int kElementsPer16Bytes = kType == ElementType::kF32 ? 4 : 8;

// Decodes one 16-byte vector (little-endian elements) into floats.
template <ElementType kType>
__device__ __forceinline__ void Decode16(
    const uint4& v, float (&out)[kElementsPer16Bytes<kType>]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (kType == ElementType::kF32) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = __uint_as_float(w[i]);
  } else if constexpr (kType == ElementType::kF16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = F16BitsToFloat(w[i] & 0xffffu);
      out[2 * i + 1] = F16BitsToFloat(w[i] >> 16);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = Bf16BitsToFloat(w[i] & 0xffffu);
      out[2 * i + 1] = Bf16BitsToFloat(w[i] >> 16);
    }
  }
}

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

// ---- Append --------------------------------------------------------------

// Copies staged rows [e][plane][d] to the store [plane][first_pos + e][d] in
// 2-byte units (every row is a whole number of them).
__global__ void AppendCopyKernel(const uint16_t* staged, uint16_t* keys,
                                 int64_t capacity, int32_t planes,
                                 int64_t row_units, int64_t first_pos,
                                 int64_t total) {
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < total;
       u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t item = u / row_units;  // e * planes + plane
    const int64_t k = u % row_units;
    const int64_t e = item / planes;
    const int64_t plane = item % planes;
    keys[(plane * capacity + first_pos + e) * row_units + k] = staged[u];
  }
}

// Per (entry, plane): the L2 norm of the stored key row, accumulated in
// double in element order without contraction, as the CPU backend does.
__global__ void AppendNormKernel(ElementType type, const std::byte* staged,
                                 int32_t planes, int32_t head_dim,
                                 int64_t items, double* plane_norms) {
  const int64_t esize = type == ElementType::kF32 ? 4 : 2;
  for (int64_t item = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       item < items; item += int64_t{gridDim.x} * blockDim.x) {
    const std::byte* row = staged + item * head_dim * esize;
    double sq = 0.0;
    for (int32_t j = 0; j < head_dim; ++j) {
      const double v = LoadElementAny(type, row, j);
      sq = __dadd_rn(sq, __dmul_rn(v, v));
    }
    plane_norms[item] = __dsqrt_rn(sq);
  }
}

__global__ void AppendStateKernel(int64_t n, int32_t planes,
                                  const double* plane_norms, int64_t first_pos,
                                  int64_t first_index, const uint8_t* pinned,
                                  double affinity_init, EntryState state) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    double sum = 0.0;
    for (int32_t p = 0; p < planes; ++p) {
      sum = __dadd_rn(sum, plane_norms[e * planes + p]);
    }
    const int64_t pos = first_pos + e;
    state.index[pos] = first_index + e;
    state.pinned[pos] = pinned != nullptr && pinned[e] != 0 ? 1 : 0;
    state.key_norm[pos] = __ddiv_rn(sum, static_cast<double>(planes));
    state.affinity[pos] = affinity_init;
    state.h2o_acc[pos] = 0.0;
  }
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

// ---- Keep scores ---------------------------------------------------------

// Unsigned bits whose order is the numeric order of `s` (-0 == +0; NaN
// canonical, above +inf).
__device__ __forceinline__ uint64_t OrderedBits(double s) {
  if (s == 0.0) s = 0.0;
  uint64_t u = isnan(s) ? 0x7FF8000000000000ull
                        : static_cast<uint64_t>(__double_as_longlong(s));
  return (u >> 63) != 0 ? ~u : (u | (uint64_t{1} << 63));
}

__device__ __forceinline__ bool IsExcluded(const SortKey& k) {
  return k.hi == kExcluded && k.lo == kExcluded;
}

__global__ void __launch_bounds__(kThreads) FinishKernel(FinishArgs a) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < a.live;
       p += int64_t{gridDim.x} * blockDim.x) {
    double mean = 0.0;
    double att = 0.0;
    if (a.rows > 0) {
      for (int64_t r = 0; r < a.rows; ++r) {
        const float zr = a.z[r * a.live + p];
        if (a.need_mean) mean += zr;
        if (a.need_attention) {
          att += static_cast<double>(expf(zr - a.row_max[r])) * a.row_inv[r];
        }
      }
      mean *= a.inv_rows;
    }
    const int64_t index = a.state.index[p];
    // The state updates of this step, then the keep score (rule.h).
    double h2o_acc = 0.0;
    if (a.ranking == Ranking::kH2o) {
      h2o_acc = a.state.h2o_acc[p] + att;
      a.state.h2o_acc[p] = h2o_acc;
    }
    double omega = 0.0;
    if (a.ranking == Ranking::kAffinity) {
      const double v = rule::UpdateAffinity(a.seed_rule, a.lambda, a.beta_h,
                                            mean, a.state.affinity[p]);
      a.state.affinity[p] = v;
      omega = rule::Omega(a.seed_rule, v);
    }
    const double keep = rule::KeepScore(
        rule::StepView{.ranking = a.ranking,
                       .streaming_sinks = a.streaming_sinks,
                       .h2o_recent_from = a.ranking == Ranking::kH2o
                                              ? *a.h2o_recent_from
                                              : 0,
                       .seed = a.seed,
                       .step = a.step},
        rule::EntryView{.index = index,
                        .key_norm = a.ranking == Ranking::kKeyNorm
                                        ? a.state.key_norm[p]
                                        : 0.0,
                        .attention = att,
                        .h2o_acc = h2o_acc,
                        .omega = omega});
    a.keep[p] = keep;
    a.protect[p] = rule::IsProtected(a.sinks, a.recent, index, a.next_index,
                                     a.state.pinned[p] != 0)
                       ? 1
                       : 0;
    if (a.need_mean) a.mean_logit[p] = mean;
    if (a.need_attention) a.attention[p] = att;
  }
}

// ---- Selection -----------------------------------------------------------

__global__ void IotaKernel(int32_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = static_cast<int32_t>(i);
  }
}

__global__ void H2oRecentFromKernel(const int64_t* sorted_index, int64_t n,
                                    int64_t keep, int64_t* out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  if (keep <= 0) {
    *out = INT64_MAX;
  } else if (keep >= n) {
    *out = INT64_MIN;
  } else {
    *out = sorted_index[n - keep];
  }
}

__global__ void TokenKeysKernel(const double* keep, const uint8_t* protect,
                                const int64_t* index, int64_t live,
                                SortKey* keys, int32_t* vals) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < live;
       p += int64_t{gridDim.x} * blockDim.x) {
    if (protect[p] != 0) {
      keys[p] = SortKey{kExcluded, kExcluded};
    } else {
      keys[p] = SortKey{OrderedBits(keep[p]), static_cast<uint64_t>(index[p])};
    }
    vals[p] = static_cast<int32_t>(p);
  }
}

__global__ void BlockKeysKernel(const int64_t* sorted_index,
                                const int32_t* sorted_pos, const double* keep,
                                const uint8_t* protect, int64_t live,
                                int32_t block_size, bool reduce_max,
                                SortKey* keys, int32_t* vals) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < live;
       t += int64_t{gridDim.x} * blockDim.x) {
    SortKey key{kExcluded, kExcluded};
    const int64_t first = sorted_index[t];
    const int64_t last = t + block_size - 1;
    // Indices are unique and sorted: the block is whole and live exactly when
    // its first token is at t and its last at t + N - 1.
    if (first % block_size == 0 && last < live &&
        sorted_index[last] == first + block_size - 1) {
      double sum = 0.0;
      double max = 0.0;
      bool any_protected = false;
      for (int32_t j = 0; j < block_size; ++j) {
        const int32_t pos = sorted_pos[t + j];
        const double s = keep[pos];
        sum += s;
        max = j == 0 ? s : fmax(max, s);
        any_protected = any_protected || protect[pos] != 0;
      }
      if (!any_protected) {
        const double score =
            reduce_max ? max : sum / static_cast<double>(block_size);
        key = SortKey{OrderedBits(score),
                      static_cast<uint64_t>(first / block_size)};
      }
    }
    keys[t] = key;
    vals[t] = static_cast<int32_t>(t);
  }
}

__global__ void EmitTokensKernel(const SortKey* keys, const int32_t* vals,
                                 int64_t count, int32_t* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = IsExcluded(keys[i]) ? -1 : vals[i];
  }
}

__global__ void EmitBlocksKernel(const SortKey* keys, const int32_t* vals,
                                 const int32_t* sorted_pos, int64_t blocks,
                                 int32_t block_size, int32_t* out) {
  const int64_t total = blocks * block_size;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < total;
       u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = u / block_size;
    const int64_t j = u % block_size;
    out[u] = IsExcluded(keys[i]) ? -1 : sorted_pos[vals[i] + j];
  }
}

// ---- Compaction ----------------------------------------------------------

template <typename Unit>
__global__ void MoveRowsKernel(const int32_t* moves, int64_t count, Unit* keys,
                               int64_t capacity, int32_t planes,
                               int64_t row_units) {
  const int64_t total = count * planes * row_units;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < total;
       u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = u % row_units;
    const int64_t item = u / row_units;  // m * planes + plane
    const int64_t m = item / planes;
    const int64_t plane = item % planes;
    const int64_t dst = moves[2 * m];
    const int64_t src = moves[2 * m + 1];
    keys[(plane * capacity + dst) * row_units + k] =
        keys[(plane * capacity + src) * row_units + k];
  }
}

__global__ void MoveStateKernel(const int32_t* moves, int64_t count,
                                EntryState s) {
  for (int64_t m = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; m < count;
       m += int64_t{gridDim.x} * blockDim.x) {
    const int32_t dst = moves[2 * m];
    const int32_t src = moves[2 * m + 1];
    s.index[dst] = s.index[src];
    s.pinned[dst] = s.pinned[src];
    s.key_norm[dst] = s.key_norm[src];
    s.affinity[dst] = s.affinity[src];
    s.h2o_acc[dst] = s.h2o_acc[src];
  }
}

struct SortKeyDecomposer {
  __host__ __device__ ::cuda::std::tuple<uint64_t&, uint64_t&> operator()(
      SortKey& key) const {
    return {key.hi, key.lo};
  }
};

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

cudaError_t LaunchAppend(const AppendArgs& a, cudaStream_t stream) {
  if (a.n <= 0) return cudaSuccess;
  const int64_t esize = a.type == ElementType::kF32 ? 4 : 2;
  const int64_t row_units = int64_t{a.head_dim} * esize / 2;
  const int64_t copy_units = a.n * a.planes * row_units;
  AppendCopyKernel<<<GridFor(copy_units, kThreads), kThreads, 0, stream>>>(
      reinterpret_cast<const uint16_t*>(a.staged),
      reinterpret_cast<uint16_t*>(a.keys), a.capacity, a.planes, row_units,
      a.first_pos, copy_units);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  const int64_t items = a.n * a.planes;
  AppendNormKernel<<<GridFor(items, kThreads), kThreads, 0, stream>>>(
      a.type, a.staged, a.planes, a.head_dim, items, a.plane_norms);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  AppendStateKernel<<<GridFor(a.n, kThreads), kThreads, 0, stream>>>(
      a.n, a.planes, a.plane_norms, a.first_pos, a.first_index, a.pinned,
      a.affinity_init, a.state);
  return cudaGetLastError();
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

cudaError_t LaunchIota(int32_t* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  IotaKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(out, n);
  return cudaGetLastError();
}

cudaError_t SortTempBytes(int64_t n, size_t* index_sort, size_t* key_sort) {
  *index_sort = 0;
  *key_sort = 0;
  const int items = static_cast<int>(std::max<int64_t>(n, 1));
  cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, *index_sort, static_cast<const uint64_t*>(nullptr),
      static_cast<uint64_t*>(nullptr), static_cast<const int32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), items, 0, 64);
  if (err != cudaSuccess) return err;
  return cub::DeviceRadixSort::SortPairs(
      nullptr, *key_sort, static_cast<const SortKey*>(nullptr),
      static_cast<SortKey*>(nullptr), static_cast<const int32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), items, SortKeyDecomposer{}, 0, 128);
}

cudaError_t SortByIndex(void* temp, size_t temp_bytes, const int64_t* index,
                        const int32_t* pos_in, int64_t* index_out,
                        int32_t* pos_out, int64_t n, int index_bits,
                        cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  // Append indices are non-negative, so their unsigned order is theirs.
  return cub::DeviceRadixSort::SortPairs(
      temp, temp_bytes, reinterpret_cast<const uint64_t*>(index),
      reinterpret_cast<uint64_t*>(index_out), pos_in, pos_out,
      static_cast<int>(n), 0, std::clamp(index_bits, 1, 64), stream);
}

cudaError_t SortKeys(void* temp, size_t temp_bytes, const SortKey* keys_in,
                     SortKey* keys_out, const int32_t* val_in, int32_t* val_out,
                     int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out,
                                         val_in, val_out, static_cast<int>(n),
                                         SortKeyDecomposer{}, 0, 128, stream);
}

cudaError_t LaunchH2oRecentFrom(const int64_t* sorted_index, int64_t n,
                                int64_t keep, int64_t* out,
                                cudaStream_t stream) {
  H2oRecentFromKernel<<<1, 1, 0, stream>>>(sorted_index, n, keep, out);
  return cudaGetLastError();
}

cudaError_t LaunchFinish(const FinishArgs& a, cudaStream_t stream) {
  if (a.live <= 0) return cudaSuccess;
  FinishKernel<<<GridFor(a.live, kThreads), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchTokenKeys(const double* keep, const uint8_t* protect,
                            const int64_t* index, int64_t live, SortKey* keys,
                            int32_t* vals, cudaStream_t stream) {
  if (live <= 0) return cudaSuccess;
  TokenKeysKernel<<<GridFor(live, kThreads), kThreads, 0, stream>>>(
      keep, protect, index, live, keys, vals);
  return cudaGetLastError();
}

cudaError_t LaunchBlockKeys(const int64_t* sorted_index,
                            const int32_t* sorted_pos, const double* keep,
                            const uint8_t* protect, int64_t live,
                            int32_t block_size, bool reduce_max, SortKey* keys,
                            int32_t* vals, cudaStream_t stream) {
  if (live <= 0) return cudaSuccess;
  BlockKeysKernel<<<GridFor(live, kThreads), kThreads, 0, stream>>>(
      sorted_index, sorted_pos, keep, protect, live, block_size, reduce_max,
      keys, vals);
  return cudaGetLastError();
}

cudaError_t LaunchEmitTokens(const SortKey* sorted_keys,
                             const int32_t* sorted_vals, int64_t count,
                             int32_t* out, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  EmitTokensKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(
      sorted_keys, sorted_vals, count, out);
  return cudaGetLastError();
}

cudaError_t LaunchEmitBlocks(const SortKey* sorted_keys,
                             const int32_t* sorted_vals,
                             const int32_t* sorted_pos, int64_t blocks,
                             int32_t block_size, int32_t* out,
                             cudaStream_t stream) {
  if (blocks <= 0) return cudaSuccess;
  EmitBlocksKernel<<<GridFor(blocks * block_size, kThreads), kThreads, 0,
                     stream>>>(sorted_keys, sorted_vals, sorted_pos, blocks,
                               block_size, out);
  return cudaGetLastError();
}

cudaError_t LaunchMoves(const int32_t* moves, int64_t count, std::byte* keys,
                        int64_t capacity, int32_t planes, int64_t row_bytes,
                        EntryState state, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  if (row_bytes % 16 == 0) {
    const int64_t units = row_bytes / 16;
    MoveRowsKernel<uint4>
        <<<GridFor(count * planes * units, kThreads), kThreads, 0, stream>>>(
            moves, count, reinterpret_cast<uint4*>(keys), capacity, planes,
            units);
  } else {
    const int64_t units = row_bytes / 2;
    MoveRowsKernel<uint16_t>
        <<<GridFor(count * planes * units, kThreads), kThreads, 0, stream>>>(
            moves, count, reinterpret_cast<uint16_t*>(keys), capacity, planes,
            units);
  }
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  MoveStateKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(
      moves, count, state);
  return cudaGetLastError();
}

}  // namespace entrokv::internal::cuda
