#include "entrokv/core/metrics.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace entrokv {
namespace {

// Two entries, one head, d = 2. The query makes z_i = k_i.x, so with
// k0.x = 0 and k1.x = ln 3 the full-cache weights are 1/4 and 3/4.
class QualityMetricsTest : public ::testing::Test {
 protected:
  Shape shape_{.layers = 1,
               .kv_heads = 1,
               .q_heads = 1,
               .head_dim = 2,
               .element_type = ElementType::kF32};
  std::vector<float> keys_{0.0f, 0.0f, static_cast<float>(std::log(3.0)), 0.0f};
  std::vector<float> values_{1.0f, 0.0f, 0.0f, 1.0f};
  std::vector<float> query_{static_cast<float>(std::sqrt(2.0)), 0.0f};
};

TEST_F(QualityMetricsTest, FullCacheHasNoErrorAndFullRecall) {
  const std::vector<uint8_t> live{1, 1};
  const QualityMetrics q = ComputeQuality(shape_, keys_, values_, query_, live);
  EXPECT_NEAR(q.memory_error, 0.0, 1e-12);
  EXPECT_NEAR(q.attention_recall, 1.0, 1e-12);
  EXPECT_NEAR(q.first_order_error, 0.0, 1e-12);
}

TEST_F(QualityMetricsTest, EvictingTheLightEntryMatchesHandComputation) {
  // o_full = (1/4, 3/4); kept output = v1 = (0, 1).
  // error = |(1/4, -1/4)| / |(1/4, 3/4)| = sqrt(2)/sqrt(10).
  // first order: (1 - 3/4) * |v0 - o_full| / |o_full| = 3 sqrt(2) / (4
  // sqrt(10)).
  const std::vector<uint8_t> live{0, 1};
  const QualityMetrics q = ComputeQuality(shape_, keys_, values_, query_, live);
  EXPECT_NEAR(q.memory_error, std::sqrt(0.2), 1e-6);
  EXPECT_NEAR(q.attention_recall, 0.75, 1e-6);
  EXPECT_NEAR(q.first_order_error, 0.75 * std::sqrt(0.2), 1e-6);
}

TEST_F(QualityMetricsTest, EvictingTheHeavyEntryLosesThreeQuartersOfTheMass) {
  // Kept output = v0 = (1, 0): error = |(-3/4, 3/4)| / |(1/4, 3/4)| = 3
  // sqrt(0.2).
  const std::vector<uint8_t> live{1, 0};
  const QualityMetrics q = ComputeQuality(shape_, keys_, values_, query_, live);
  EXPECT_NEAR(q.memory_error, 3.0 * std::sqrt(0.2), 1e-6);
  EXPECT_NEAR(q.attention_recall, 0.25, 1e-6);
  // First order: 3/4 * |v1 - o_full| / |o_full| = 3/4 * (sqrt(2)/4) /
  // (sqrt(10)/4).
  EXPECT_NEAR(q.first_order_error, 0.75 * std::sqrt(0.2), 1e-6);
}

}  // namespace
}  // namespace entrokv
