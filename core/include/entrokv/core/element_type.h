// Element types of key and query vectors, and exact conversions between them.
//
// Keys and queries travel and are stored in the session's element type: IEEE
// binary32 (f32), IEEE binary16 (f16) or bfloat16 (bf16). Conversions to f16
// and bf16 round to nearest, ties to even; NaN stays NaN, overflow becomes Inf
// (f16) as IEEE specifies. Conversions to float are exact. All functions are
// pure and thread-safe. Buffers are little-endian, as on the wire.

#ifndef ENTROKV_CORE_ELEMENT_TYPE_H_
#define ENTROKV_CORE_ELEMENT_TYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace entrokv {

enum class ElementType : uint8_t { kF32 = 0, kF16 = 1, kBf16 = 2 };

// Bytes per element: 4, 2 or 2.
size_t ElementSize(ElementType type);

// "f32", "f16" or "bf16".
std::string_view ElementTypeName(ElementType type);

// Parses a name of ElementTypeName(); returns false on anything else.
bool ParseElementType(std::string_view name, ElementType* type);

uint16_t FloatToF16(float value);
float F16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);
float Bf16ToFloat(uint16_t bits);

// Converts `count` elements stored at `src` (unaligned little-endian bytes of
// `type`) to floats.
// REQUIRES: `src` holds count * ElementSize(type) bytes, `dst` count floats.
void DecodeElements(ElementType type, const std::byte* src, size_t count,
                    float* dst);

// Converts `count` floats to `type`, written as little-endian bytes.
// REQUIRES: `dst` holds count * ElementSize(type) bytes.
void EncodeElements(ElementType type, const float* src, size_t count,
                    std::byte* dst);

}  // namespace entrokv

#endif  // ENTROKV_CORE_ELEMENT_TYPE_H_
