// Scores (docs/step-semantics.md section 3) against a naive double-precision
// reference, on random shapes with GQA, in every element type.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core_test_util.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::ComputeReferenceScores;
using ::entrokv::testing::Near;
using ::entrokv::testing::ReferenceScores;
using ::entrokv::testing::StepBuilder;
using ::entrokv::testing::TinyConfig;
using ::entrokv::testing::TinySession;

TEST(ScoringTest, GqaReadsTheKvHeadOfEachQueryGroup) {
  // q heads 0, 1 share kv head 0; q heads 2, 3 share kv head 1 (h / 2, not
  // h % 2). The key has (1, 0) in kv head 0 and (0, 0) in kv head 1; only
  // q heads 0 and 1 look along (1, 0). So z = (1, 1, 0, 0) and s = 0.5; a
  // kv(h) = h % 2 mapping would give (1, 0, 0, 0) and s = 0.25.
  SessionConfig config = TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 4);
  config.shape.kv_heads = 2;
  config.shape.q_heads = 4;
  TinySession session(config);
  const float r = std::sqrt(2.0f);
  session.AppendKey(1, {1, 0, 0, 0});
  session.StepWithQuery({r, 0, r, 0, 0, 0, 0, 0});
  ASSERT_EQ(session.trace().mean_logit.size(), 1u);
  EXPECT_NEAR(session.trace().mean_logit[0], 0.5, 1e-6);
  EXPECT_NEAR(session.trace().attention[0], 1.0, 1e-6);
}

TEST(ScoringTest, AttentionIsTheMeanOverHeadsOfPerHeadSoftmax) {
  // Two q heads over one kv head. Head 0 scores (ln 3, 0) -> (3/4, 1/4);
  // head 1 scores (0, 0) -> (1/2, 1/2). a = (5/8, 3/8), s = (ln 3 / 2, 0).
  SessionConfig config = TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 4);
  config.shape.q_heads = 2;
  TinySession session(config);
  const float r = std::sqrt(2.0f);
  session.AppendKey(1, {std::log(3.0f), 0}).AppendKey(2, {0, 0});
  session.StepWithQuery({r, 0, 0, 0});
  EXPECT_NEAR(session.trace().attention[0], 5.0 / 8, 1e-6);
  EXPECT_NEAR(session.trace().attention[1], 3.0 / 8, 1e-6);
  EXPECT_NEAR(session.trace().mean_logit[0], std::log(3.0) / 2, 1e-6);
  EXPECT_NEAR(session.trace().mean_logit[1], 0.0, 1e-6);
}

TEST(ScoringTest, LargeLogitsDoNotOverflowTheSoftmax) {
  // Scores of ±1000 would overflow exp() without the max shift.
  TinySession session(TinyConfig(Ranking::kTova, BudgetControl::kFixed, 1));
  session.Append(1, 1000, 0).Append(2, 999, 0).Append(3, -1000, 0);
  const StepResult result = session.Step(1.0f, 0.0f);
  EXPECT_THAT(result.evicted, ::testing::ElementsAre(2, 3));
  const double e = std::exp(-1.0);
  EXPECT_NEAR(session.trace().attention[0], 1 / (1 + e), 1e-6);
  EXPECT_NEAR(session.trace().attention[1], e / (1 + e), 1e-6);
  EXPECT_NEAR(session.trace().attention[2], 0.0, 1e-12);
  EXPECT_NEAR(session.trace().mean_logit[2], -1000.0, 1e-3);
}

struct RandomShapeCase {
  int layers, kv_heads, group, head_dim;
  ElementType type;
};

void PrintTo(const RandomShapeCase& c, std::ostream* os) {
  *os << c.layers << " layers, " << c.kv_heads << " kv heads x group "
      << c.group << ", d " << c.head_dim << ", " << ElementTypeName(c.type);
}

class RandomShapeScoringTest
    : public ::testing::TestWithParam<RandomShapeCase> {
 protected:
  // A value exactly representable in f32, f16 and bf16 (8 significant bits),
  // or any float for f32.
  float Draw() {
    if (GetParam().type == ElementType::kF32) return normal_(rng_);
    return static_cast<float>(int(rng_() % 511) - 255) / 64.0f;
  }
  std::mt19937 rng_{2024};
  std::normal_distribution<float> normal_{0.0f, 1.0f};
};

TEST_P(RandomShapeScoringTest, MatchesTheNaiveReferenceStepAfterStep) {
  const RandomShapeCase& c = GetParam();
  SessionConfig config;
  config.shape.layers = c.layers;
  config.shape.kv_heads = c.kv_heads;
  config.shape.q_heads = c.kv_heads * c.group;
  config.shape.head_dim = c.head_dim;
  config.shape.element_type = c.type;
  config.budget = 17;
  config.ranking = Ranking::kWindow;
  config.budget_control = BudgetControl::kFixed;
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(config, {}));

  std::vector<uint64_t> live;  // Append order.
  std::map<uint64_t, std::vector<float>> keys;
  uint64_t next_slot = 5000;
  const int appends[] = {24, 1, 3, 0, 1, 9, 1, 1, 30, 2};
  uint64_t step = 1;
  for (int n : appends) {
    StepBuilder builder(config.shape);
    for (int i = 0; i < n; ++i) {
      std::vector<float> key(config.shape.key_elements());
      for (float& x : key) x = Draw();
      builder.Append(next_slot, key);
      keys[next_slot] = key;
      live.push_back(next_slot++);
    }
    std::vector<float> query(config.shape.query_elements());
    for (float& x : query) x = Draw();
    builder.Query(query);
    StepResult result;
    StepTrace trace;
    ASSERT_OK(session->Step(builder.Build(step++), &result, &trace));

    ASSERT_EQ(trace.slots, live);
    std::vector<std::vector<float>> live_keys;
    for (uint64_t slot : live) live_keys.push_back(keys[slot]);
    const ReferenceScores want =
        ComputeReferenceScores(config.shape, live_keys, query);
    ASSERT_EQ(trace.mean_logit.size(), live.size());
    ASSERT_EQ(trace.attention.size(), live.size());
    double attention_sum = 0.0;
    for (size_t i = 0; i < live.size(); ++i) {
      EXPECT_TRUE(Near(trace.mean_logit[i], want.mean_logit[i], 1e-5, 1e-5))
          << "s of entry " << i << " at step " << step - 1;
      EXPECT_TRUE(Near(trace.attention[i], want.attention[i], 1e-5, 1e-7))
          << "a of entry " << i << " at step " << step - 1;
      attention_sum += trace.attention[i];
    }
    EXPECT_NEAR(attention_sum, 1.0, 1e-5);

    for (uint64_t slot : result.evicted) {
      auto it = std::find(live.begin(), live.end(), slot);
      ASSERT_NE(it, live.end()) << "evicted a slot that is not live";
      live.erase(it);
    }
    ASSERT_EQ(session->LiveSlots(), live);
  }
}

std::string ShapeName(const ::testing::TestParamInfo<RandomShapeCase>& info) {
  const RandomShapeCase& c = info.param;
  return "L" + std::to_string(c.layers) + "_kv" + std::to_string(c.kv_heads) +
         "_g" + std::to_string(c.group) + "_d" + std::to_string(c.head_dim) +
         "_" + std::string(ElementTypeName(c.type));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RandomShapeScoringTest,
    ::testing::Values(RandomShapeCase{1, 1, 1, 2, ElementType::kF32},
                      RandomShapeCase{1, 1, 1, 2, ElementType::kF16},
                      RandomShapeCase{2, 2, 4, 8, ElementType::kF32},
                      RandomShapeCase{2, 2, 4, 8, ElementType::kBf16},
                      RandomShapeCase{3, 4, 2, 64, ElementType::kF16},
                      RandomShapeCase{1, 1, 8, 128, ElementType::kF32},
                      RandomShapeCase{2, 8, 4, 128, ElementType::kF16},
                      RandomShapeCase{3, 3, 1, 5, ElementType::kBf16},
                      RandomShapeCase{2, 2, 2, 33, ElementType::kF32}),
    ShapeName);

TEST(ScoringTest, KeysAreScoredAsRoundedToTheElementType) {
  // 1 + 2^-11 is stored as 1.0 in f16 and bf16: the score uses the rounded
  // key. Query √2 · (1, 0) -> z = key[0] as stored.
  for (ElementType type : {ElementType::kF16, ElementType::kBf16}) {
    SessionConfig config =
        TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 4);
    config.shape.element_type = type;
    TinySession session(config);
    session.Append(1, 1.0f + std::ldexp(1.0f, -11), 0).Append(2, 3.0f, 0);
    session.Step(1.0f, 0.0f);
    // The query √2 itself is rounded too: the score is q' · 1 / √2.
    const float q = type == ElementType::kF16
                        ? F16ToFloat(FloatToF16(std::sqrt(2.0f)))
                        : Bf16ToFloat(FloatToBf16(std::sqrt(2.0f)));
    EXPECT_NEAR(session.trace().mean_logit[0], q / std::sqrt(2.0), 1e-6)
        << ElementTypeName(type);
    EXPECT_NEAR(session.trace().mean_logit[1], 3 * q / std::sqrt(2.0), 1e-6);
  }
}

// Every key comes across whole when the store grows: 1000 entries of 16 KiB
// (d = 4096, f32) fill a store of 1000, and 200 more grow it to 2000 (31 MiB;
// the capacity doubles). Key i holds i in its first and
// last elements, and the query 32 · (e_0 + e_4095) scaled by 1/√4096 makes
// z_i = 0.5 i + 0.5 i = i, exact in float.
TEST(ScoringTest, KeysSurviveTheStoresGrowth) {
  SessionConfig config =
      TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 4000);
  config.shape.head_dim = 4096;
  TinySession session(config);
  const auto key = [](int i) {
    std::vector<float> k(4096, 0.0f);
    k.front() = float(i);
    k.back() = float(i);
    return k;
  };
  std::vector<float> query(4096, 0.0f);
  query.front() = 32.0f;
  query.back() = 32.0f;
  for (int i = 0; i < 1000; ++i) session.AppendKey(100 + i, key(i));
  session.StepWithQuery(query);
  for (int i = 1000; i < 1200; ++i) session.AppendKey(100 + i, key(i));
  session.StepWithQuery(query);
  ASSERT_EQ(session.trace().mean_logit.size(), 1200u);
  for (int i = 0; i < 1200; ++i) {
    ASSERT_EQ(session.trace().mean_logit.at(session.TraceIndex(100 + i)),
              double(i))
        << "entry " << i;
  }
}

}  // namespace
}  // namespace entrokv
