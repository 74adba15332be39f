// What the CUDA backend's kernel files share (cuda_kernels_store.cu,
// cuda_kernels_score.cu, cuda_kernels_select.cu): the block size, the grid
// size of a launch, and the decoding of stored key elements.
//
// Internal to core/cuda: included only by its .cu files (nvcc).

#ifndef ENTROKV_CORE_CUDA_CUDA_KERNELS_COMMON_CUH_
#define ENTROKV_CORE_CUDA_CUDA_KERNELS_COMMON_CUH_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "entrokv/core/element_type.h"

namespace entrokv::internal::cuda {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

inline unsigned GridFor(int64_t items, int64_t per_block) {
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

}  // namespace entrokv::internal::cuda

#endif  // ENTROKV_CORE_CUDA_CUDA_KERNELS_COMMON_CUH_
