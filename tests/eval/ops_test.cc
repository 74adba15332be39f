// Hand-computed cases for the numerical pieces of the tinyllama forward pass.

#include "tinyllama/ops.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace entrokv::tinyllama {
namespace {

TEST(RmsNormTest, ScalesByRootMeanSquareAndWeight) {
  // mean(x²) = (1 + 4 + 9 + 16) / 4 = 7.5; 1 / sqrt(7.5 + 1e-5) = 0.36514813...
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> w = {1, 1, 2, 0.5f};
  std::vector<float> out(4);
  RmsNorm(x, w, absl::MakeSpan(out));
  const double s = 1.0 / std::sqrt(7.5 + 1e-5);
  EXPECT_NEAR(out[0], 1 * s, 1e-6);
  EXPECT_NEAR(out[1], 2 * s, 1e-6);
  EXPECT_NEAR(out[2], 2 * 3 * s, 1e-6);
  EXPECT_NEAR(out[3], 0.5 * 4 * s, 1e-6);
  EXPECT_NEAR(out[0], 0.36514813, 1e-6);
}

TEST(RmsNormTest, EpsilonKeepsZeroInputFinite) {
  const std::vector<float> x = {0, 0};
  const std::vector<float> w = {1, 1};
  std::vector<float> out(2, 7.0f);
  RmsNorm(x, w, absl::MakeSpan(out));
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
}

TEST(RmsNormTest, MayWriteInPlace) {
  std::vector<float> x = {3, 4};  // mean(x²) = 12.5
  const std::vector<float> w = {1, 1};
  RmsNorm(x, w, absl::MakeSpan(x));
  EXPECT_NEAR(x[0], 3 / std::sqrt(12.5 + 1e-5), 1e-6);
  EXPECT_NEAR(x[1], 4 / std::sqrt(12.5 + 1e-5), 1e-6);
}

TEST(MatVecTest, MultipliesRowMajor) {
  // [[1 2 3], [4 5 6]] · [1, 0, -1] = [-2, -2].
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const std::vector<float> x = {1, 0, -1};
  std::vector<float> out(2);
  MatVec(w, x, absl::MakeSpan(out));
  EXPECT_EQ(out[0], -2.0f);
  EXPECT_EQ(out[1], -2.0f);
}

TEST(RopeTest, RotatesEachPairOfEveryHead) {
  // Two heads of dim 4; pair 0 turns by (cos, sin) = (0.6, 0.8), pair 1 by a
  // quarter turn (0, 1): (a, b) → (−b, a).
  std::vector<float> v = {1, 0, 2, 3, 0, 1, -1, 5};
  const std::vector<float> cos = {0.6f, 0.0f};
  const std::vector<float> sin = {0.8f, 1.0f};
  ApplyRope(absl::MakeSpan(v), 4, cos, sin);
  const std::vector<float> expected = {0.6f, 0.8f, -3, 2, -0.8f, 0.6f, -5, -1};
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], expected[i], 1e-6);
}

TEST(RopeTest, ZeroAngleIsIdentityAndNormIsKept) {
  std::vector<float> v = {0.3f, -1.2f};
  ApplyRope(absl::MakeSpan(v), 2, std::vector<float>{1.0f},
            std::vector<float>{0.0f});
  EXPECT_EQ(v[0], 0.3f);
  EXPECT_EQ(v[1], -1.2f);
  // Angle 1 rad: the norm sqrt(0.09 + 1.44) stays.
  ApplyRope(absl::MakeSpan(v), 2, std::vector<float>{std::cos(1.0f)},
            std::vector<float>{std::sin(1.0f)});
  EXPECT_NEAR(std::hypot(v[0], v[1]), std::sqrt(1.53), 1e-6);
  EXPECT_NEAR(v[0], 0.3 * std::cos(1.0) + 1.2 * std::sin(1.0), 1e-6);
}

TEST(SoftmaxTest, MatchesRatiosOfExponentials) {
  // exp(0) : exp(ln 2) : exp(ln 3) = 1 : 2 : 3.
  std::vector<float> x = {0.0f, std::log(2.0f), std::log(3.0f)};
  Softmax(absl::MakeSpan(x));
  EXPECT_NEAR(x[0], 1.0 / 6, 1e-6);
  EXPECT_NEAR(x[1], 2.0 / 6, 1e-6);
  EXPECT_NEAR(x[2], 3.0 / 6, 1e-6);
}

TEST(SoftmaxTest, IsStableForLargeLogits) {
  std::vector<float> x = {1000.0f, 1000.0f, -1000.0f};
  Softmax(absl::MakeSpan(x));
  EXPECT_NEAR(x[0], 0.5, 1e-7);
  EXPECT_NEAR(x[1], 0.5, 1e-7);
  EXPECT_EQ(x[2], 0.0f);
}

TEST(SwigluTest, GatesWithSilu) {
  // silu(0) = 0; silu(ln 3) = ln 3 · 3/4; silu(−ln 3) = −ln 3 · 1/4.
  std::vector<float> gate = {0.0f, std::log(3.0f), -std::log(3.0f)};
  const std::vector<float> up = {5.0f, 2.0f, 4.0f};
  Swiglu(absl::MakeSpan(gate), up);
  EXPECT_EQ(gate[0], 0.0f);
  EXPECT_NEAR(gate[1], std::log(3.0) * 0.75 * 2, 1e-6);
  EXPECT_NEAR(gate[2], -std::log(3.0) * 0.25 * 4, 1e-6);
}

TEST(NegativeLogLikelihoodTest, UniformAndSkewedCases) {
  EXPECT_NEAR(NegativeLogLikelihood(std::vector<float>{0, 0, 0, 0}, 2),
              std::log(4.0), 1e-12);
  // p = [1, 3] / 4 for logits [0, ln 3]: −log p[0] = ln 4.
  const std::vector<float> skewed = {0.0f, std::log(3.0f)};
  EXPECT_NEAR(NegativeLogLikelihood(skewed, 0), std::log(4.0), 1e-6);
  EXPECT_NEAR(NegativeLogLikelihood(skewed, 1), std::log(4.0 / 3.0), 1e-6);
  // Stable far from zero.
  EXPECT_NEAR(NegativeLogLikelihood(std::vector<float>{1e4f, 1e4f}, 0),
              std::log(2.0), 1e-9);
}

TEST(EntropyTest, UniformIsLogNAndPeakedIsNearZero) {
  EXPECT_NEAR(Entropy(std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1}),
              std::log(8.0), 1e-12);
  // p = [1/4, 3/4]: H = −(1/4 ln 1/4 + 3/4 ln 3/4) = 0.5623351446...
  EXPECT_NEAR(Entropy(std::vector<float>{0.0f, std::log(3.0f)}), 0.5623351446,
              1e-6);
  EXPECT_NEAR(Entropy(std::vector<float>{0.0f, 1e4f}), 0.0, 1e-12);
}

}  // namespace
}  // namespace entrokv::tinyllama
