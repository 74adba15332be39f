// PrepareQueries (cpu_kernels.h): a step's queries decoded, scaled and summed
// per GQA group in one pass. The expected values are the three passes it
// replaces, written here one element at a time: decode with the scalar
// converters of element_type.h, multiply by the scale, add the group's
// vectors in order to 0.0f. Compared bit for bit.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cpu_kernels.h"
#include "entrokv/core/element_type.h"
#include "gtest/gtest.h"

namespace entrokv {
namespace {

float Element(ElementType type, const std::vector<std::byte>& bytes,
              int64_t i) {
  if (type == ElementType::kF32) {
    float v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
  }
  uint16_t b;
  std::memcpy(&b, bytes.data() + 2 * i, 2);
  return type == ElementType::kF16 ? F16ToFloat(b) : Bf16ToFloat(b);
}

struct Case {
  ElementType type;
  int64_t groups;
  int32_t group;
  // 300: more than one of the scalar path's 256-element chunks, and not a
  // multiple of the vector path's 8 (with AVX2): the scalar path.
  int64_t dim;
};

class PrepareQueriesTest : public ::testing::TestWithParam<Case> {
 protected:
  // Random queries in the case's type, with a negative zero at element 0
  // (0.0f + -0.0f is +0.0f: a sum must start from 0.0f, not from q_0), and
  // subnormals of f16 and of float at elements 1 to 3.
  std::vector<std::byte> Queries(uint32_t seed) const {
    const Case& c = GetParam();
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> values(size_t(c.groups * c.group * c.dim));
    for (float& v : values) v = normal(rng);
    values[0] = -0.0f;
    values[1] = 3e-6f;     // An f16 subnormal.
    values[2] = -1e-7f;    // Another (f16 keeps about 6e-8 at the least).
    values[3] = 1e-39f;    // A float subnormal (f32, bf16; 0 in f16).
    std::vector<std::byte> bytes(values.size() * ElementSize(c.type));
    EncodeElements(c.type, values.data(), values.size(), bytes.data());
    return bytes;
  }
};

TEST_P(PrepareQueriesTest, ScaledAndSummedAreTheThreePassesBitForBit) {
  const Case& c = GetParam();
  const std::vector<std::byte> bytes = Queries(7);
  const float scale = 0.0883883461356163f;  // 1/sqrt(128) as a float.
  const int64_t elements = c.groups * c.group * c.dim;

  std::vector<float> want_scaled(size_t(elements), 0.0f);
  for (int64_t i = 0; i < elements; ++i) {
    want_scaled[i] = Element(c.type, bytes, i) * scale;
  }
  std::vector<float> want_summed(size_t(c.groups * c.dim), 0.0f);
  for (int64_t lk = 0; lk < c.groups; ++lk) {
    for (int32_t g = 0; g < c.group; ++g) {
      for (int64_t j = 0; j < c.dim; ++j) {
        want_summed[lk * c.dim + j] += want_scaled[(lk * c.group + g) * c.dim + j];
      }
    }
  }

  std::vector<float> scaled(want_scaled.size(), 1.0f);
  std::vector<float> summed(want_summed.size(), 1.0f);
  internal::PrepareQueries(c.type, bytes.data(), c.groups, c.group, c.dim,
                           scale, scaled.data(), summed.data());
  for (size_t i = 0; i < scaled.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(scaled[i]),
              std::bit_cast<uint32_t>(want_scaled[i]))
        << "scaled element " << i;
  }
  for (size_t i = 0; i < summed.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(summed[i]),
              std::bit_cast<uint32_t>(want_summed[i]))
        << "summed element " << i;
  }
  if (c.group == 1) {  // The sum of one vector: +0.0f where it was -0.0f.
    EXPECT_EQ(std::bit_cast<uint32_t>(summed[0]), 0u);
  }
}

TEST_P(PrepareQueriesTest, EitherOutputAloneIsTheSameAsBoth) {
  const Case& c = GetParam();
  const std::vector<std::byte> bytes = Queries(11);
  const size_t elements = size_t(c.groups * c.group * c.dim);
  const size_t sums = size_t(c.groups * c.dim);
  std::vector<float> scaled(elements), summed(sums);
  internal::PrepareQueries(c.type, bytes.data(), c.groups, c.group, c.dim,
                           0.125f, scaled.data(), summed.data());
  std::vector<float> scaled_only(elements), summed_only(sums);
  internal::PrepareQueries(c.type, bytes.data(), c.groups, c.group, c.dim,
                           0.125f, scaled_only.data(), nullptr);
  internal::PrepareQueries(c.type, bytes.data(), c.groups, c.group, c.dim,
                           0.125f, nullptr, summed_only.data());
  EXPECT_EQ(std::memcmp(scaled.data(), scaled_only.data(),
                        elements * sizeof(float)),
            0);
  EXPECT_EQ(std::memcmp(summed.data(), summed_only.data(),
                        sums * sizeof(float)),
            0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PrepareQueriesTest,
    ::testing::Values(Case{ElementType::kF16, 8, 4, 128},
                      Case{ElementType::kF16, 5, 1, 64},
                      Case{ElementType::kF16, 3, 1, 300},
                      Case{ElementType::kF16, 3, 2, 300},
                      Case{ElementType::kBf16, 4, 4, 64},
                      Case{ElementType::kBf16, 2, 8, 300},
                      Case{ElementType::kF32, 4, 4, 64},
                      Case{ElementType::kF32, 2, 1, 16},
                      Case{ElementType::kF32, 2, 3, 20}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return absl::StrCat(std::string(ElementTypeName(c.type)), "_", c.groups, "x",
                          c.group, "x", c.dim);
    });

}  // namespace
}  // namespace entrokv
