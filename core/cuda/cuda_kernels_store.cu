// Device kernels of the CUDA backend that write the key store and the entry
// state: append and compaction (see cuda_kernels.h and docs/cuda.md).
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

}  // namespace

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
