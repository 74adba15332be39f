// EntropyFromLogits and ValidateEntropy: closed forms, extreme logits, a naive
// double-precision reference, and rejection of non-finite input.

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "entrokv/core/entropy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::testing::HasSubstr;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

double Entropy(std::vector<float> logits) {
  const absl::StatusOr<double> h = EntropyFromLogits(logits);
  EXPECT_TRUE(h.ok()) << h.status();
  return h.ok() ? *h : -1.0;
}

// H = −Σ p log p in long double, the naive way with a max shift.
double ReferenceEntropy(const std::vector<float>& logits) {
  long double max = logits[0];
  for (float x : logits) max = std::max<long double>(max, x);
  long double sum = 0;
  for (float x : logits) sum += std::exp(x - max);
  long double h = 0;
  for (float x : logits) {
    const long double p = std::exp(x - max) / sum;
    if (p > 0) h -= p * std::log(p);
  }
  return double(h);
}

TEST(EntropyFromLogitsTest, UniformLogitsGiveLogV) {
  for (int v : {1, 2, 3, 7, 512, 32000}) {
    EXPECT_NEAR(Entropy(std::vector<float>(v, 0.25f)), std::log(double(v)),
                1e-9 * std::log(double(v)) + 1e-12)
        << v;
  }
}

TEST(EntropyFromLogitsTest, OneHotGivesZero) {
  EXPECT_NEAR(Entropy({1e4f, 0.0f, 0.0f, 0.0f}), 0.0, 1e-12);
  EXPECT_NEAR(Entropy({-1e4f, 1e4f, -1e4f}), 0.0, 1e-12);
  EXPECT_NEAR(Entropy({5.0f}), 0.0, 1e-12);
}

TEST(EntropyFromLogitsTest, HugeLogitsNeitherOverflowNorLoseTheDistribution) {
  EXPECT_NEAR(Entropy({1e4f, 1e4f}), std::log(2.0), 1e-12);
  EXPECT_NEAR(Entropy({-1e4f, -1e4f, -1e4f}), std::log(3.0), 1e-12);
  // p = (1/4, 3/4) shifted by 1e4: H = −(¼ ln ¼ + ¾ ln ¾).
  const float shift = 1e4f;
  const float ln3 = std::log(3.0f);
  const double expected = -(0.25 * std::log(0.25) + 0.75 * std::log(0.75));
  EXPECT_NEAR(Entropy({0.0f, ln3}), expected, 1e-6);
  EXPECT_NEAR(Entropy({-shift, -shift + ln3}), expected, 1e-3);
  const double h = Entropy({1e4f, -1e4f, 1e4f - 1.0f});
  EXPECT_TRUE(std::isfinite(h));
  EXPECT_NEAR(h, ReferenceEntropy({1.0f, -2e4f, 0.0f}), 1e-9);
}

TEST(EntropyFromLogitsTest, MatchesANaiveReferenceOnRandomLogits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(1 + trial * 7);
    for (float& x : logits) x = normal(rng);
    const double h = Entropy(logits);
    ASSERT_NEAR(h, ReferenceEntropy(logits), 1e-9 * (1 + h)) << trial;
    ASSERT_GE(h, 0.0);
    ASSERT_LE(h, std::log(double(logits.size())) + 1e-9);
  }
}

TEST(EntropyFromLogitsTest, RejectsEmptyNanAndInfinities) {
  for (const std::vector<float>& bad :
       {std::vector<float>{}, std::vector<float>{0.0f, kNan},
        std::vector<float>{kInf, 0.0f}, std::vector<float>{1.0f, -kInf}}) {
    const absl::StatusOr<double> h = EntropyFromLogits(bad);
    EXPECT_STATUS_CODE(h, absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(h.status().message()), HasSubstr("logits"));
  }
}

TEST(ValidateEntropyTest, AcceptsFiniteNonNegative) {
  EXPECT_OK(ValidateEntropy(0.0));
  EXPECT_OK(ValidateEntropy(1.5));
  EXPECT_OK(ValidateEntropy(1e6));
}

TEST(ValidateEntropyTest, RejectsNegativeNanAndInfinityNamingEntropy) {
  for (double bad : {-1e-9, -1.0, double(kNan), double(kInf), -double(kInf)}) {
    const absl::Status status = ValidateEntropy(bad);
    EXPECT_STATUS_CODE(status, absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr("entropy")) << bad;
  }
}

}  // namespace
}  // namespace entrokv
