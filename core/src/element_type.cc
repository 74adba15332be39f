#include "entrokv/core/element_type.h"

#include <bit>
#include <cstring>

#include "x86_simd.h"

namespace entrokv {
namespace {

#if defined(__x86_64__)
// F16C converts exactly as F16ToFloat does (every f16 is a float).
__attribute__((target("avx,f16c"))) void DecodeF16F16c(const std::byte* src,
                                                       size_t count,
                                                       float* dst) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(
                         reinterpret_cast<const __m128i*>(src + 2 * i))));
  }
  for (; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    dst[i] = F16ToFloat(bits);
  }
}

// A bf16 is the top half of a float: each element shifted into place, eight
// at a time, the same bits as Bf16ToFloat (the scalar loop took 4.8 us for a
// token's 4096 keys at the 8B sketched shape, more than projecting them).
__attribute__((target("avx2,f16c"))) void DecodeBf16Avx2(const std::byte* src,
                                                         size_t count,
                                                         float* dst) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(dst + i, internal::Load8<ElementType::kBf16>(src + 2 * i));
  }
  for (; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    dst[i] = Bf16ToFloat(bits);
  }
}

#endif

}  // namespace

size_t ElementSize(ElementType type) {
  return type == ElementType::kF32 ? 4 : 2;
}

std::string_view ElementTypeName(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return "f32";
    case ElementType::kF16:
      return "f16";
    case ElementType::kBf16:
      return "bf16";
  }
  return "unknown";
}

bool ParseElementType(std::string_view name, ElementType* type) {
  for (ElementType t :
       {ElementType::kF32, ElementType::kF16, ElementType::kBf16}) {
    if (name == ElementTypeName(t)) {
      *type = t;
      return true;
    }
  }
  return false;
}

uint16_t FloatToF16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // Inf or NaN; NaN keeps a quiet payload bit.
    return static_cast<uint16_t>(
        sign | 0x7C00u |
        (abs > 0x7F800000u ? 0x200u | ((abs >> 13) & 0x3FFu) : 0u));
  }
  if (abs >= 0x477FF000u) {  // Rounds to >= 65520: overflow to Inf.
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (abs < 0x38800000u) {    // Below 2^-14: subnormal or zero in f16.
    if (abs < 0x33000000u) {  // Below 2^-25: rounds to zero (ties to even).
      return static_cast<uint16_t>(sign);
    }
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24: to units of 2^-24.
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  // Normal: rebias the exponent, round the mantissa to 10 bits (ties to even);
  // a carry into the exponent is the correct result.
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float F16ToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1Fu;
  uint32_t mant = bits & 0x3FFu;
  uint32_t out;
  if (exp == 0x1F) {
    out = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    out = sign;
  } else {  // Subnormal: normalise.
    uint32_t e = 113u;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    out = sign | (e << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(out);
}

uint16_t FloatToBf16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep it quiet NaN.
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);  // Ties to even.
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float Bf16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

void DecodeElements(ElementType type, const std::byte* src, size_t count,
                    float* dst) {
  // An empty span may carry null pointers (a step with no appends), and
  // memcpy's pointers must be valid even for size 0.
  if (count == 0) return;
  switch (type) {
    case ElementType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case ElementType::kF16:
#if defined(__x86_64__)
      if (internal::HaveF16c()) return DecodeF16F16c(src, count, dst);
#endif
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = F16ToFloat(bits);
      }
      return;
    case ElementType::kBf16:
#if defined(__x86_64__)
      if (internal::HaveAvx2()) return DecodeBf16Avx2(src, count, dst);
#endif
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = Bf16ToFloat(bits);
      }
      return;
  }
}

void EncodeElements(ElementType type, const float* src, size_t count,
                    std::byte* dst) {
  if (count == 0) return;  // As in DecodeElements.
  switch (type) {
    case ElementType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case ElementType::kF16:
      for (size_t i = 0; i < count; ++i) {
        const uint16_t bits = FloatToF16(src[i]);
        std::memcpy(dst + 2 * i, &bits, 2);
      }
      return;
    case ElementType::kBf16:
      for (size_t i = 0; i < count; ++i) {
        const uint16_t bits = FloatToBf16(src[i]);
        std::memcpy(dst + 2 * i, &bits, 2);
      }
      return;
  }
}

}  // namespace entrokv
