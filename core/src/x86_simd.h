// What the baseline-ISA files with vector paths by target attribute share on
// x86-64 (cpu_kernels.cc, element_type.cc): the CPU checks that guard those
// paths, and an exact load of eight elements as floats.

#ifndef ENTROKV_CORE_SRC_X86_SIMD_H_
#define ENTROKV_CORE_SRC_X86_SIMD_H_

#if defined(__x86_64__)

#include <cpuid.h>
#include <immintrin.h>

#include <cstddef>

#include "entrokv/core/element_type.h"

namespace entrokv::internal {

// AVX and F16C (CPUID.1:ECX.F16C; clang before 16 has no "f16c" for
// __builtin_cpu_supports).
inline bool HaveF16c() {
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") &&
           __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return have;
}

// AVX2 with FMA and F16C: what every AVX2 path here may use.
inline bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2") &&
                           __builtin_cpu_supports("fma") && HaveF16c();
  return have;
}

// Eight elements of `kType` at `p` (unaligned) as floats, exactly the values
// of the scalar converters (every f16 and bf16 is a float).
// REQUIRES: HaveAvx2(); called from a function with the same target.
template <ElementType kType>
__attribute__((target("avx2,f16c"))) inline __m256 Load8(const std::byte* p) {
  if constexpr (kType == ElementType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (kType == ElementType::kF16) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {  // bf16: the float's upper half.
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
        16));
  }
}

}  // namespace entrokv::internal

#endif  // __x86_64__

#endif  // ENTROKV_CORE_SRC_X86_SIMD_H_
