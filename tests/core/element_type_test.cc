// Element types: known bit patterns, exhaustive round trips and rounding
// against an independent nearest-value reference (ties to even, overflow to
// Inf), and the little-endian buffer codecs.

#include "entrokv/core/element_type.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace entrokv {
namespace {

float FromBits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t ToBits(float value) { return std::bit_cast<uint32_t>(value); }

bool IsF16Nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x03FF); }
bool IsBf16Nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x007F); }

// The value of an f16 bit pattern, computed from the IEEE definition.
double F16Value(uint16_t h) {
  const int sign = h >> 15;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(double(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN()
                         : std::numeric_limits<double>::infinity();
  } else {
    magnitude = std::ldexp(double(1024 + mantissa), exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

// Round to nearest, ties to even, over the ordered non-negative patterns
// [0, max_finite]; the pattern after max_finite is Inf, whose "value" for the
// purpose of rounding is `inf_value` (the next power of two).
uint16_t ReferenceRound(float x, uint16_t max_finite, double inf_value,
                        double (*value)(uint16_t), uint16_t sign_bit) {
  const bool negative = std::signbit(x);
  const double a = std::fabs(double(x));
  uint16_t result;
  if (std::isinf(x)) {
    result = max_finite + 1;
  } else {
    // Largest pattern whose value is <= a.
    uint32_t lo = 0, hi = max_finite;
    while (lo < hi) {
      const uint32_t mid = (lo + hi + 1) / 2;
      if (value(uint16_t(mid)) <= a)
        lo = mid;
      else
        hi = mid - 1;
    }
    const uint16_t below = uint16_t(lo);
    const double v_below = value(below);
    const double v_above = below == max_finite ? inf_value : value(below + 1);
    const double midpoint = (v_below + v_above) / 2;  // Exact in double.
    if (a == v_below)
      result = below;
    else if (a < midpoint)
      result = below;
    else if (a > midpoint)
      result = below + 1;
    else
      result = (below & 1) ? below + 1 : below;  // Ties to even.
  }
  return negative ? uint16_t(result | sign_bit) : result;
}

uint16_t ReferenceF16(float x) {
  return ReferenceRound(x, 0x7BFF, 65536.0, &F16Value, 0x8000);
}
double Bf16Value(uint16_t b) { return FromBits(uint32_t(b) << 16); }
uint16_t ReferenceBf16(float x) {
  return ReferenceRound(x, 0x7F7F, std::ldexp(1.0, 128), &Bf16Value, 0x8000);
}

// ---------------------------------------------------------------- f16

TEST(F16ConversionTest, KnownBitPatterns) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3C00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToF16(0.0f), 0x0000);
  EXPECT_EQ(FloatToF16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToF16(0.5f), 0x3800);
  EXPECT_EQ(FloatToF16(0.1f), 0x2E66);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7BFF);               // Largest finite.
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -14)), 0x0400);  // Smallest normal.
  EXPECT_EQ(FloatToF16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(FloatToF16(-std::numeric_limits<float>::infinity()), 0xFC00);
}

TEST(F16ConversionTest, OverflowBecomesInfinity) {
  EXPECT_EQ(FloatToF16(65519.0f), 0x7BFF);  // Below the midpoint.
  EXPECT_EQ(FloatToF16(65520.0f), 0x7C00);  // The midpoint: ties to even Inf.
  EXPECT_EQ(FloatToF16(-65520.0f), 0xFC00);
  EXPECT_EQ(FloatToF16(1e6f), 0x7C00);
  EXPECT_EQ(FloatToF16(std::numeric_limits<float>::max()), 0x7C00);
}

TEST(F16ConversionTest, SubnormalsRoundToNearestEven) {
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -24)), 0x0001);         // Smallest.
  EXPECT_EQ(FloatToF16(1023 * std::ldexp(1.0f, -24)), 0x03FF);  // Largest.
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -25)), 0x0000);  // Tie: to even 0.
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  EXPECT_EQ(FloatToF16(3 * std::ldexp(1.0f, -25)), 0x0002);  // Tie: up to 2.
  EXPECT_EQ(FloatToF16(5 * std::ldexp(1.0f, -25)), 0x0002);  // Tie: down to 2.
  EXPECT_EQ(FloatToF16(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(FloatToF16(-std::ldexp(1.0f, -30)), 0x8000);  // Keeps its sign.
  // Rounding up out of the subnormals into the smallest normal.
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
}

TEST(F16ConversionTest, NormalTiesRoundToEven) {
  // 1 + 2^-11 lies halfway between 1 (even) and 1 + 2^-10 (odd).
  EXPECT_EQ(FloatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3·2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(FloatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Just above a tie rounds up.
  EXPECT_EQ(FloatToF16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)),
            0x3C01);
  // 2049 lies halfway between 2048 and 2050.
  EXPECT_EQ(FloatToF16(2049.0f), FloatToF16(2048.0f));
  EXPECT_EQ(FloatToF16(2051.0f), FloatToF16(2052.0f));
}

TEST(F16ConversionTest, NanStaysNan) {
  EXPECT_TRUE(IsF16Nan(FloatToF16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload lies only in bits f16 drops must not become Inf.
  EXPECT_TRUE(IsF16Nan(FloatToF16(FromBits(0x7F800001))));
  EXPECT_TRUE(IsF16Nan(FloatToF16(FromBits(0xFF800001))));
  EXPECT_TRUE(std::isnan(F16ToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(F16ToFloat(0x7C01)));
}

TEST(F16ConversionTest, DecodesEveryPatternExactly) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const double expected = F16Value(uint16_t(bits));
    const float got = F16ToFloat(uint16_t(bits));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
    } else {
      ASSERT_EQ(double(got), expected) << std::hex << bits;
      ASSERT_EQ(std::signbit(got), bool(bits & 0x8000)) << std::hex << bits;
    }
  }
}

TEST(F16ConversionTest, EveryPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const uint16_t back = FloatToF16(F16ToFloat(uint16_t(bits)));
    if (IsF16Nan(uint16_t(bits))) {
      ASSERT_TRUE(IsF16Nan(back)) << std::hex << bits;
    } else {
      ASSERT_EQ(back, bits) << std::hex << bits;
    }
  }
}

TEST(F16ConversionTest, RoundsLikeTheNearestEvenReference) {
  // Every midpoint between neighbours, one float either side of it, and a
  // sweep over all float patterns.
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const double v = F16Value(uint16_t(h));
    const double next = h == 0x7BFF ? 65536.0 : F16Value(uint16_t(h + 1));
    const float mid = float((v + next) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, INFINITY), -mid}) {
      ASSERT_EQ(FloatToF16(x), ReferenceF16(x))
          << x << " (bits " << std::hex << ToBits(x) << ")";
    }
  }
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 4099) {
    const float x = FromBits(uint32_t(bits));
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToF16(x), ReferenceF16(x))
        << x << " (bits " << std::hex << bits << ")";
  }
}

// ---------------------------------------------------------------- bf16

TEST(Bf16ConversionTest, KnownBitPatterns) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-1.0f), 0xBF80);
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(3.0f), 0x4040);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0x4049), 3.140625f);
  EXPECT_EQ(FloatToBf16(FromBits(0x00010000)), 0x0001);  // Subnormal 2^-133.
  EXPECT_EQ(Bf16ToFloat(0x0001), std::ldexp(1.0f, -133));
}

TEST(Bf16ConversionTest, TiesRoundToEvenNotTruncate) {
  // 1 + 2^-8 lies halfway between 1 (even) and 1 + 2^-7 (odd).
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3·2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  // Above the midpoint: truncation would give 0x3F80.
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808001)), 0x3F81);
  EXPECT_EQ(FloatToBf16(FromBits(0x3F80FFFF)), 0x3F81);
  // The largest float is past bf16's last midpoint: Inf.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(FloatToBf16(FromBits(0x7F7F7FFF)), 0x7F7F);
}

TEST(Bf16ConversionTest, NanStaysNan) {
  EXPECT_TRUE(IsBf16Nan(FloatToBf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsBf16Nan(FloatToBf16(FromBits(0x7F800001))));  // Not Inf.
  EXPECT_TRUE(IsBf16Nan(FloatToBf16(FromBits(0xFFFFFFFF))));  // Not a carry.
  EXPECT_TRUE(std::isnan(Bf16ToFloat(0x7FC0)));
}

TEST(Bf16ConversionTest, EveryPatternDecodesExactlyAndRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const float value = Bf16ToFloat(uint16_t(bits));
    ASSERT_EQ(ToBits(value), bits << 16) << std::hex << bits;
    const uint16_t back = FloatToBf16(value);
    if (IsBf16Nan(uint16_t(bits))) {
      ASSERT_TRUE(IsBf16Nan(back)) << std::hex << bits;
    } else {
      ASSERT_EQ(back, bits) << std::hex << bits;
    }
  }
}

TEST(Bf16ConversionTest, RoundsLikeTheNearestEvenReference) {
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 4099) {
    const float x = FromBits(uint32_t(bits));
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToBf16(x), ReferenceBf16(x))
        << x << " (bits " << std::hex << bits << ")";
  }
  // Every midpoint pattern (low half 0x8000) and its neighbours.
  for (uint32_t high = 0; high < 0x7F80; high += 1) {
    for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u}) {
      const float x = FromBits((high << 16) | low);
      ASSERT_EQ(FloatToBf16(x), ReferenceBf16(x)) << std::hex << high;
    }
  }
}

// ---------------------------------------------------------------- buffers

TEST(ElementTypeTest, SizesAndNames) {
  EXPECT_EQ(ElementSize(ElementType::kF32), 4u);
  EXPECT_EQ(ElementSize(ElementType::kF16), 2u);
  EXPECT_EQ(ElementSize(ElementType::kBf16), 2u);
  for (ElementType type :
       {ElementType::kF32, ElementType::kF16, ElementType::kBf16}) {
    ElementType parsed = ElementType::kF32;
    EXPECT_TRUE(ParseElementType(ElementTypeName(type), &parsed));
    EXPECT_EQ(parsed, type);
  }
  EXPECT_EQ(ElementTypeName(ElementType::kF32), "f32");
  EXPECT_EQ(ElementTypeName(ElementType::kF16), "f16");
  EXPECT_EQ(ElementTypeName(ElementType::kBf16), "bf16");
  ElementType parsed;
  for (const char* bad : {"", "fp16", "f64", "bf16 ", "float"}) {
    EXPECT_FALSE(ParseElementType(bad, &parsed)) << bad;
  }
}

TEST(ElementTypeTest, EncodesLittleEndian) {
  const float values[] = {1.0f, -2.0f};
  std::byte f16[4];
  EncodeElements(ElementType::kF16, values, 2, f16);
  EXPECT_EQ(f16[0], std::byte{0x00});
  EXPECT_EQ(f16[1], std::byte{0x3C});
  EXPECT_EQ(f16[2], std::byte{0x00});
  EXPECT_EQ(f16[3], std::byte{0xC0});
  std::byte bf16[4];
  EncodeElements(ElementType::kBf16, values, 2, bf16);
  EXPECT_EQ(bf16[0], std::byte{0x80});
  EXPECT_EQ(bf16[1], std::byte{0x3F});
  EXPECT_EQ(bf16[3], std::byte{0xC0});
  std::byte f32[8];
  EncodeElements(ElementType::kF32, values, 2, f32);
  EXPECT_EQ(f32[3], std::byte{0x3F});
  EXPECT_EQ(f32[2], std::byte{0x80});
  EXPECT_EQ(f32[0], std::byte{0x00});
}

TEST(ElementTypeTest, DecodesFromUnalignedBuffers) {
  std::vector<float> values = {0.5f, -3.25f, 1024.0f, 0.0f, 7.0f};
  for (ElementType type :
       {ElementType::kF32, ElementType::kF16, ElementType::kBf16}) {
    SCOPED_TRACE(ElementTypeName(type));
    std::vector<std::byte> buffer(1 + values.size() * ElementSize(type));
    EncodeElements(type, values.data(), values.size(), buffer.data() + 1);
    std::vector<float> decoded(values.size());
    DecodeElements(type, buffer.data() + 1, values.size(), decoded.data());
    EXPECT_EQ(decoded, values);  // All exactly representable in every type.
  }
}

// DecodeElements (the vector paths where the CPU has them) on every bit
// pattern at once, from an unaligned buffer, with a tail of 3 past a multiple
// of 8: bf16 must give exactly the pattern shifted into a float's top half,
// NaN payloads included; f16 the value of the pattern by its definition.
TEST(ElementTypeTest, DecodesEveryPatternInBulk) {
  const size_t count = 0x10000 + 3;
  std::vector<std::byte> buffer(1 + 2 * count);
  for (size_t i = 0; i < count; ++i) {
    const uint16_t bits = uint16_t(i);  // The tail repeats 0, 1, 2.
    buffer[1 + 2 * i] = std::byte(bits & 0xFF);
    buffer[2 + 2 * i] = std::byte(bits >> 8);
  }
  std::vector<float> decoded(count);
  DecodeElements(ElementType::kBf16, buffer.data() + 1, count, decoded.data());
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(ToBits(decoded[i]), uint32_t(uint16_t(i)) << 16) << i;
  }
  DecodeElements(ElementType::kF16, buffer.data() + 1, count, decoded.data());
  for (size_t i = 0; i < count; ++i) {
    const double expected = F16Value(uint16_t(i));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(decoded[i])) << i;
    } else {
      ASSERT_EQ(double(decoded[i]), expected) << i;
      ASSERT_EQ(std::signbit(decoded[i]), bool(i & 0x8000)) << i;
    }
  }
}

TEST(ElementTypeTest, CodecsAgreeWithTheScalarConversions) {
  std::vector<float> values;
  for (int i = -300; i <= 300; ++i)
    values.push_back(i * 0.0137f + 1e-5f * i * i);
  for (ElementType type : {ElementType::kF16, ElementType::kBf16}) {
    std::vector<std::byte> bytes(values.size() * 2);
    EncodeElements(type, values.data(), values.size(), bytes.data());
    std::vector<float> decoded(values.size());
    DecodeElements(type, bytes.data(), values.size(), decoded.data());
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t bits = uint16_t(uint8_t(bytes[2 * i])) |
                            uint16_t(uint16_t(uint8_t(bytes[2 * i + 1])) << 8);
      const uint16_t scalar = type == ElementType::kF16
                                  ? FloatToF16(values[i])
                                  : FloatToBf16(values[i]);
      ASSERT_EQ(bits, scalar) << i;
      ASSERT_EQ(decoded[i], type == ElementType::kF16 ? F16ToFloat(scalar)
                                                      : Bf16ToFloat(scalar));
    }
  }
}

}  // namespace
}  // namespace entrokv
