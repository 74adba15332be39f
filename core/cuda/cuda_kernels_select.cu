// Device kernels of the CUDA backend that finish a step and select its
// evictions: the ranking update, keep scores and protection of
// entrokv/core/rule.h, the append-order sort, the h2o window, and the token
// and block selection (see cuda_kernels.h and docs/cuda.md).
//
// Every kernel is a grid-stride loop over its items, so any item count fits
// any grid. Arithmetic that the CPU backend does in double is done in double
// here, in the same order where bit-identity matters (key norms); where the
// CPU's order is not reproducible (dot products, block sums) results agree to
// float rounding.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cuda/std/tuple>

#include "cuda_kernels.h"
#include "cuda_kernels_common.cuh"
#include "entrokv/core/rule.h"

namespace entrokv::internal::cuda {
namespace {

constexpr uint64_t kExcluded = ~uint64_t{0};

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
    double expected = 0.0;
    for (int64_t r = 0; r < a.expected_rows; ++r) {
      expected += static_cast<double>(expf(a.expected_z[r * a.live + p] -
                                           a.expected_max[r])) *
                  a.expected_inv[r];
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
                       .step = a.step,
                       .birth_weight = a.birth_weight,
                       .rkv_lambda = a.rkv_lambda},
        rule::EntryView{.index = index,
                        .key_norm = a.ranking == Ranking::kKeyNorm
                                        ? a.state.key_norm[p]
                                        : 0.0,
                        .attention = att,
                        .h2o_acc = h2o_acc,
                        .omega = omega,
                        .key_diff = a.key_diff != nullptr ? a.key_diff[p] : 0.0,
                        .expected = expected,
                        .birth_entropy = a.ranking == Ranking::kBirth
                                             ? a.state.affinity[p]
                                             : 0.0,
                        .redundancy =
                            a.redundancy != nullptr ? a.redundancy[p] : 0.0});
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

// Whether the i-th smallest candidate goes: among the first `take`, or
// scoring below the threshold (EmitLimit).
__device__ __forceinline__ bool Chosen(const SortKey& key, int64_t i,
                                       const EmitLimit& limit) {
  if (IsExcluded(key)) return false;
  return i < limit.take ||
         (limit.use_tau && key.hi < OrderedBits(limit.tau));
}

__global__ void EmitTokensKernel(const SortKey* keys, const int32_t* vals,
                                 int64_t count, EmitLimit limit,
                                 int32_t* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = Chosen(keys[i], i, limit) ? vals[i] : -1;
  }
}

__global__ void EmitBlocksKernel(const SortKey* keys, const int32_t* vals,
                                 const int32_t* sorted_pos, int64_t blocks,
                                 EmitLimit limit, int32_t block_size,
                                 int32_t* out) {
  const int64_t total = blocks * block_size;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < total;
       u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = u / block_size;
    const int64_t j = u % block_size;
    out[u] = Chosen(keys[i], i, limit) ? sorted_pos[vals[i] + j] : -1;
  }
}

struct SortKeyDecomposer {
  __host__ __device__ ::cuda::std::tuple<uint64_t&, uint64_t&> operator()(
      SortKey& key) const {
    return {key.hi, key.lo};
  }
};

}  // namespace

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
                             const EmitLimit& limit, int32_t* out,
                             cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  EmitTokensKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(
      sorted_keys, sorted_vals, count, limit, out);
  return cudaGetLastError();
}

cudaError_t LaunchEmitBlocks(const SortKey* sorted_keys,
                             const int32_t* sorted_vals,
                             const int32_t* sorted_pos, int64_t blocks,
                             const EmitLimit& limit, int32_t block_size,
                             int32_t* out, cudaStream_t stream) {
  if (blocks <= 0) return cudaSuccess;
  EmitBlocksKernel<<<GridFor(blocks * block_size, kThreads), kThreads, 0,
                     stream>>>(sorted_keys, sorted_vals, sorted_pos, blocks,
                               limit, block_size, out);
  return cudaGetLastError();
}

}  // namespace entrokv::internal::cuda
