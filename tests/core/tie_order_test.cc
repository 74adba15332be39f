// The tie rule of docs/step-semantics.md section 8 for the attention rankings:
// two entries with bit-identical keys get bit-identical keep scores wherever
// they sit in the session's storage (a vector lane, a vector tail, the scalar
// path), so the lower append index is evicted first. The positions below
// straddle the 16-float and 8-double vector widths of the CPU kernels.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <vector>

#include "core_test_util.h"
#include "cpu_kernels.h"
#include "entrokv/core/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace entrokv {
namespace {

using ::entrokv::testing::TinySession;
using ::testing::ElementsAre;

// Two entries with the same key at storage positions `first` < `second` of
// `live` entries appended in one step (so position = append index).
struct TiePlacement {
  int first;
  int second;
  int live;
};

std::ostream& operator<<(std::ostream& os, const TiePlacement& p) {
  return os << "positions " << p.first << " and " << p.second << " of "
            << p.live;
}

constexpr TiePlacement kPlacements[] = {
    {0, 16, 17},   // A vector lane and the one-entry tail.
    {0, 31, 32},   // The first and last lane of two full vectors.
    {5, 37, 40},   // A lane and the float tail (the doubles have no tail).
    {3, 9, 12},    // All tail: no full float vector.
    {15, 16, 18},  // Either side of the first vector boundary.
    {1, 33, 35},   // A lane and the tail of both widths.
};

// Scaled scores of the tied pair (every other entry scores 0, the maximum).
constexpr float kTieLogits[] = {-1.0f, -0.5f, -2.0f, -3.25f, -0.1f, -7.0f};

constexpr uint64_t kFirstSlot = 1000;

// One layer, one head, d = 2: a single softmax row.
Shape OneRowShape() { return ::entrokv::testing::TinyShape(); }

// Two layers of two q heads over one kv head: four softmax rows summed into
// each entry's attention.
Shape FourRowShape() {
  Shape shape = ::entrokv::testing::TinyShape();
  shape.layers = 2;
  shape.q_heads = 2;
  return shape;
}

class TieOrderTest : public ::testing::TestWithParam<Ranking> {
 protected:
  // Appends `placement.live` entries in one step with budget live − 1, the
  // pair at `placement` with key (t, 0) in every layer and the others (0, 0).
  // Query row r is √2·(c_r, 0), so the pair scores c_r·t < 0 in every row and
  // every other entry 0: the pair has the lowest attention and ties.
  // Returns the evicted slots; the pair's keep scores go to *first_score and
  // *second_score.
  std::vector<uint64_t> EvictOne(const Shape& shape,
                                 const TiePlacement& placement, float t,
                                 double* first_score, double* second_score) {
    SessionConfig config;
    config.shape = shape;
    config.ranking = GetParam();
    config.budget_control = BudgetControl::kFixed;
    config.budget = placement.live - 1;
    config.h2o.recent_fraction = 0.0;  // No entry is kept as recent.
    TinySession session(config);
    for (int p = 0; p < placement.live; ++p) {
      const bool tied = p == placement.first || p == placement.second;
      std::vector<float> key;
      for (int l = 0; l < shape.layers; ++l) {
        key.push_back(tied ? t : 0.0f);
        key.push_back(0.0f);
      }
      session.AppendKey(kFirstSlot + p, key);
    }
    const float r = std::sqrt(2.0f);
    const float c[] = {1.0f, 0.75f, 1.5f, 0.3f};
    std::vector<float> query;
    for (int row = 0; row < shape.layers * shape.q_heads; ++row) {
      query.push_back(r * c[row % 4]);
      query.push_back(0.0f);
    }
    const StepResult result = session.StepWithQuery(query);
    *first_score = session.RankScore(kFirstSlot + placement.first);
    *second_score = session.RankScore(kFirstSlot + placement.second);
    return result.evicted;
  }

  void ExpectLowerIndexEvicted(const Shape& shape) {
    for (const TiePlacement& placement : kPlacements) {
      for (float t : kTieLogits) {
        SCOPED_TRACE(::testing::Message()
                     << placement << ", logit " << t << ", "
                     << shape.layers * shape.q_heads << " rows");
        double first = 0.0, second = 0.0;
        const std::vector<uint64_t> evicted =
            EvictOne(shape, placement, t, &first, &second);
        EXPECT_EQ(std::memcmp(&first, &second, sizeof(double)), 0)
            << "keep scores " << first << " and " << second
            << " are not bit-identical";
        EXPECT_THAT(evicted, ElementsAre(kFirstSlot + placement.first));
      }
    }
  }
};

TEST_P(TieOrderTest, EvictsTheLowerAppendIndexOfTwoIdenticalKeysInOneRow) {
  ExpectLowerIndexEvicted(OneRowShape());
}

TEST_P(TieOrderTest, EvictsTheLowerAppendIndexOfTwoIdenticalKeysInFourRows) {
  ExpectLowerIndexEvicted(FourRowShape());
}

INSTANTIATE_TEST_SUITE_P(AttentionRankings, TieOrderTest,
                         ::testing::Values(Ranking::kTova, Ranking::kH2o),
                         [](const auto& info) {
                           return std::string(RankingName(info.param));
                         });

// The kernel itself: in rows where every entry but one has the same logit,
// every such entry gets the same attention bit for bit, for every row length
// up to past four float vectors.
void ExpectEqualLogitsGetEqualAttention(void (*accumulate)(float*, int64_t,
                                                           int64_t, double,
                                                           double*)) {
  constexpr int64_t kRows = 5;
  const float logits[kRows] = {-1.0f, -0.1f, -7.0f, -0.3f, -5.5f};
  for (int64_t n = 2; n <= 70; ++n) {
    const int64_t peak = n / 2;  // The one entry with logit 0, the maximum.
    std::vector<float> z(static_cast<size_t>(kRows * n));
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t p = 0; p < n; ++p)
        z[r * n + p] = p == peak ? 0.0f : logits[r];
    }
    std::vector<double> attention(static_cast<size_t>(n), 0.0);
    accumulate(z.data(), kRows, n, 1.0 / kRows, attention.data());
    // Independent value: the mean over rows of e^t / (1 + (n − 1)·e^t).
    double expected = 0.0;
    for (float t : logits) {
      expected += std::exp(double{t}) /
                  (1.0 + static_cast<double>(n - 1) * std::exp(double{t}));
    }
    expected /= kRows;
    const int64_t reference = peak == 0 ? 1 : 0;
    for (int64_t p = 0; p < n; ++p) {
      if (p == peak) continue;
      ASSERT_EQ(
          std::memcmp(&attention[p], &attention[reference], sizeof(double)), 0)
          << "n " << n << ": position " << p << " has " << attention[p]
          << ", position " << reference << " has " << attention[reference];
      ASSERT_TRUE(::entrokv::testing::Near(attention[p], expected, 1e-6, 0))
          << "n " << n << ", position " << p;
    }
  }
}

TEST(AccumulateSoftmaxTest, EqualLogitsGetBitIdenticalAttention) {
  ExpectEqualLogitsGetEqualAttention(&internal::AccumulateSoftmax);
}

TEST(AccumulateSoftmaxTest,
     ScalarFallbackGivesEqualLogitsBitIdenticalAttention) {
  ExpectEqualLogitsGetEqualAttention(&internal::AccumulateSoftmaxScalar);
}

}  // namespace
}  // namespace entrokv
