// Typed vector views and engine-side entropy. Expected bit patterns are the
// IEEE binary16 / bfloat16 encodings worked out by hand.

#include "entrokv/client/vectors.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

std::vector<uint16_t> AsU16(const std::string& bytes) {
  std::vector<uint16_t> out(bytes.size() / 2);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST(VectorsTest, F32ToF16AndBf16RoundToKnownBitPatterns) {
  const std::vector<float> values = {1.0f, -2.5f, 0.0f, 65504.0f};
  std::string f16;
  AppendConverted(VectorView::F32(values), ElementType::kF16, &f16);
  EXPECT_EQ(AsU16(f16),
            (std::vector<uint16_t>{0x3C00, 0xC100, 0x0000, 0x7BFF}));
  std::string bf16;
  AppendConverted(VectorView::F32(values), ElementType::kBf16, &bf16);
  // 65504 = 0x477FE000 in binary32; to bf16 it rounds up to 0x4780 (65536).
  EXPECT_EQ(AsU16(bf16),
            (std::vector<uint16_t>{0x3F80, 0xC020, 0x0000, 0x4780}));
}

TEST(VectorsTest, F16ToBf16AndF32GoThroughTheExactValue) {
  const std::vector<uint16_t> f16 = {0x3C00, 0x3555};  // 1.0, 0.333251953125
  std::string f32;
  AppendConverted(VectorView::F16(f16), ElementType::kF32, &f32);
  ASSERT_EQ(f32.size(), 8u);
  float decoded[2];
  std::memcpy(decoded, f32.data(), 8);
  EXPECT_EQ(decoded[0], 1.0f);
  EXPECT_EQ(decoded[1], 0.333251953125f);
  std::string bf16;
  AppendConverted(VectorView::F16(f16), ElementType::kBf16, &bf16);
  // 0.333251953125 = 0x3EAAA000: the dropped half 0xA000 is above 0x8000,
  // so bf16 rounds up to 0x3EAB.
  EXPECT_EQ(AsU16(bf16), (std::vector<uint16_t>{0x3F80, 0x3EAB}));
}

TEST(VectorsTest, SameTypeIsCopiedAndAppended) {
  const std::vector<uint16_t> bits = {0x1234, 0xABCD};
  std::string out = "xy";
  AppendConverted(VectorView::Bf16(bits), ElementType::kBf16, &out);
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out.substr(0, 2), "xy");
  EXPECT_EQ(AsU16(out.substr(2)), bits);
}

TEST(VectorsTest, EntropyOfUniformLogitsIsLogOfTheirCount) {
  const std::vector<float> logits(8, 3.0f);
  ASSERT_OK_AND_ASSIGN(double h, EntropyOfLogits(logits));
  EXPECT_NEAR(h, std::log(8.0), 1e-9);
  // Two equal logits far above the rest: ln 2.
  const std::vector<uint16_t> f16 = {0x4900 /* 10 */, 0x4900, 0xC900 /* -10 */};
  ASSERT_OK_AND_ASSIGN(double h2, EntropyOfLogits(f16, ElementType::kF16));
  const double p_small = std::exp(-20.0) / (2 + std::exp(-20.0));
  const double p_big = 1.0 / (2 + std::exp(-20.0));
  EXPECT_NEAR(h2, -2 * p_big * std::log(p_big) - p_small * std::log(p_small),
              1e-9);
  EXPECT_STATUS_CODE(EntropyOfLogits(std::vector<float>{}),
                     absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace entrokv
