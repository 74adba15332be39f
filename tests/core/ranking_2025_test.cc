// The rankings of 2025-26 (keydiff, expected, birth, rkv) on tiny cases whose
// scores are worked out here, from docs/step-semantics.md sections 2, 3, 5
// and 7, not from the backend. One layer, one head, d = 2, f32 (TinySession: Step(x, y)
// sends a query whose scaled logit of key k is x·k0 + y·k1).

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core_test_util.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::StepBuilder;
using ::entrokv::testing::TinyConfig;
using ::entrokv::testing::TinySession;
using ::testing::ElementsAre;

// ---------------------------------------------------------------- keydiff

// −cos(k, m) for d = 2, m the mean of the live keys' unit vectors.
std::vector<double> MinusCosToMeanDirection(
    const std::vector<std::pair<double, double>>& keys) {
  double m0 = 0.0, m1 = 0.0;
  for (auto [a, b] : keys) {
    const double norm = std::hypot(a, b);
    m0 += a / norm / keys.size();
    m1 += b / norm / keys.size();
  }
  const double m = std::hypot(m0, m1);
  std::vector<double> out;
  for (auto [a, b] : keys) {
    out.push_back(-(a * m0 + b * m1) / std::hypot(a, b) / m);
  }
  return out;
}

TEST(KeyDiffRankingTest, EvictsTheKeysMostAlignedWithTheMeanDirection) {
  TinySession session(
      TinyConfig(Ranking::kKeyDiff, BudgetControl::kFixed, /*budget=*/2));
  session.Append(1, 1.0f, 0.0f)
      .Append(2, 0.0f, 1.0f)
      .Append(3, 1.0f, 0.1f)
      .Append(4, 2.0f, 0.0f);
  // Unit vectors (1,0), (0,1), (0.995,0.0995), (1,0): the mean points near
  // (1,0), so 3 (cos 0.968) goes first, then 1 and 4 tie (cos 0.939) and the
  // older, 1, goes. 2 (cos 0.345) is the most distinctive. The query plays
  // no part.
  const StepResult result = session.Step(5.0f, -3.0f);
  EXPECT_THAT(result.evicted, ElementsAre(1, 3));
  EXPECT_THAT(session.Live(), ElementsAre(2, 4));
  const std::vector<double> want =
      MinusCosToMeanDirection({{1, 0}, {0, 1}, {1, 0.1}, {2, 0}});
  EXPECT_NEAR(want[2], -0.968374, 1e-6);  // The worked value above.
  for (uint64_t slot = 1; slot <= 4; ++slot) {
    EXPECT_NEAR(session.RankScore(slot), want[slot - 1], 1e-9) << slot;
  }
}

TEST(KeyDiffRankingTest, AZeroKeyHasCosineZero) {
  TinySession session(
      TinyConfig(Ranking::kKeyDiff, BudgetControl::kFixed, /*budget=*/1));
  session.Append(1, 0.0f, 0.0f).Append(2, 3.0f, 4.0f);
  // m = ((0,0) + (0.6,0.8)) / 2: entry 2 has cosine 1, the zero key 0.
  const StepResult result = session.StepFlat();
  EXPECT_THAT(result.evicted, ElementsAre(2));
  EXPECT_DOUBLE_EQ(session.RankScore(1), 0.0);
}

TEST(KeyDiffRankingTest, ADecisionStepMayOmitTheQueries) {
  SessionConfig config =
      TinyConfig(Ranking::kKeyDiff, BudgetControl::kFixed, /*budget=*/2);
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(config, {}));
  StepBuilder builder(config.shape);
  builder.Append(1, {1.0f, 0.0f})
      .Append(2, {0.0f, 1.0f})
      .Append(3, {1.0f, 0.1f});
  StepResult result;
  ASSERT_OK(session->Step(builder.Build(1), &result));
  EXPECT_THAT(result.evicted, ElementsAre(3));

  // Another ranking still needs them.
  config.ranking = Ranking::kWindow;
  ASSERT_OK_AND_ASSIGN(auto window, backend->CreateSession(config, {}));
  StepBuilder again(config.shape);
  again.Append(1, {1.0f, 0.0f});
  const absl::Status refused = window->Step(again.Build(1), &result);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("queries"));
}

// ---------------------------------------------------------------- expected

TEST(ExpectedRankingTest, ScoresKeysByTheAttentionOfTheGaussianQueryModel) {
  SessionConfig config =
      TinyConfig(Ranking::kExpected, BudgetControl::kFixed, /*budget=*/2);
  config.expected.ema_rate = 0.5;
  TinySession session(config);
  // Step 1: μ = q = √2·(2, 0), σ² = 0: logits 2, 0, 2; slot 2 goes.
  session.Append(1, 1.0f, 0.0f).Append(2, 0.0f, 1.0f).Append(3, 1.0f, 1.0f);
  EXPECT_THAT(session.Step(2.0f, 0.0f).evicted, ElementsAre(2));

  // Step 2: q = √2·(0, 2). δ = q − μ = √2·(−2, 2); σ² = (1 − ½)(0 + ½δ²) =
  // (2, 2); μ = μ + ½δ = √2·(1, 1). Expected logit of key k:
  // μ·k/√2 + Σ σ²_j k_j² / (2·2) = k0 + k1 + (k0² + k1²)/2.
  session.Append(4, 0.0f, 0.5f);
  const StepResult result = session.Step(0.0f, 2.0f);
  auto logit = [](double k0, double k1) {
    return k0 + k1 + (k0 * k0 + k1 * k1) / 2;
  };
  const double z1 = logit(1, 0), z3 = logit(1, 1), z4 = logit(0, 0.5);
  const double sum = std::exp(z1) + std::exp(z3) + std::exp(z4);
  EXPECT_NEAR(session.RankScore(1), std::exp(z1) / sum, 1e-6);
  EXPECT_NEAR(session.RankScore(3), std::exp(z3) / sum, 1e-6);
  EXPECT_NEAR(session.RankScore(4), std::exp(z4) / sum, 1e-6);
  // This step's own query (tova) would evict 1 (logit 0 against 1 for 4);
  // the model of the queries remembers step 1's and evicts 4.
  EXPECT_THAT(result.evicted, ElementsAre(4));
  EXPECT_THAT(session.Live(), ElementsAre(1, 3));
}

TEST(ExpectedRankingTest, RateOneIsTovaStepForStep) {
  // With ema_rate 1 the model is the step's own query with no variance, so
  // every keep score and eviction must equal tova's.
  SessionConfig expected;
  expected.shape.layers = 2;
  expected.shape.kv_heads = 2;
  expected.shape.q_heads = 4;
  expected.shape.head_dim = 8;
  expected.shape.element_type = ElementType::kF16;
  expected.budget = 12;
  expected.ranking = Ranking::kExpected;
  expected.budget_control = BudgetControl::kFixed;
  expected.expected.ema_rate = 1.0;
  expected.protection.sinks = 1;
  SessionConfig tova = expected;
  tova.ranking = Ranking::kTova;
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(auto a, backend->CreateSession(expected, {}));
  ASSERT_OK_AND_ASSIGN(auto b, backend->CreateSession(tova, {}));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  uint64_t slot = 100;
  int64_t evicted = 0;
  for (uint64_t step = 1; step <= 40; ++step) {
    StepBuilder builder(expected.shape);
    for (int i = 0; i < (step == 1 ? 10 : 1); ++i) {
      std::vector<float> key(expected.shape.key_elements());
      for (float& x : key) x = normal(rng);
      builder.Append(slot++, key);
    }
    std::vector<float> query(expected.shape.query_elements());
    for (float& x : query) x = normal(rng);
    builder.Query(query);
    StepResult ra, rb;
    StepTrace ta, tb;
    ASSERT_OK(a->Step(builder.Build(step), &ra, &ta));
    ASSERT_OK(b->Step(builder.Build(step), &rb, &tb));
    ASSERT_EQ(ra.evicted, rb.evicted) << "step " << step;
    ASSERT_EQ(ta.rank_score, tb.rank_score) << "step " << step;
    evicted += static_cast<int64_t>(ra.evicted.size());
  }
  EXPECT_GT(evicted, 20);
}

TEST(ExpectedRankingTest, NeedsPerHeadQueriesAndARateInRange) {
  SessionConfig config =
      TinyConfig(Ranking::kExpected, BudgetControl::kFixed, /*budget=*/2);
  config.shape.query_form = QueryForm::kGroupSum;
  absl::Status st = ValidateSessionConfig(config);
  EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("shape.query_form"));
  config.shape.query_form = QueryForm::kPerHead;
  for (double bad : {0.0, -0.1, 1.5, std::nan("")}) {
    config.expected.ema_rate = bad;
    st = ValidateSessionConfig(config);
    EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(st.message(), ::testing::HasSubstr("expected.ema_rate"));
  }
}

// ---------------------------------------------------------------- birth

TEST(BirthRankingTest, WeighsAttentionByTheEntropyEachEntryWasBornUnder) {
  // η = 1. Every step's query is (1, 0): the logit of key (k0, k1) is k0.
  TinySession session(
      TinyConfig(Ranking::kBirth, BudgetControl::kFixed, /*budget=*/3));
  // Step 1, the prefill: born under this step's own entropy, 1.
  session.Append(1, 1.0f, 0.0f).Append(2, 0.0f, 0.0f);
  EXPECT_TRUE(session.Step(1.0f, 0.0f, /*entropy=*/1.0).evicted.empty());
  // Step 2: slot 3 is born under step 1's entropy, 1.
  session.Append(3, 0.0f, 0.0f);
  EXPECT_TRUE(session.Step(1.0f, 0.0f, /*entropy=*/0.1).evicted.empty());
  // Step 3: slot 4 is born under step 2's entropy, 0.1. Logits 1, 0, 0, 1:
  // a = e/(2e+2) for 1 and 4, 1/(2e+2) for 2 and 3. Keep a·exp(H): 2 and 3
  // tie at e/(2e+2); the older, 2, goes.
  session.Append(4, 1.0f, 0.0f);
  const double e = std::exp(1.0);
  const double high = e / (2 * e + 2), low = 1 / (2 * e + 2);
  StepResult result = session.Step(1.0f, 0.0f, /*entropy=*/0.5);
  EXPECT_THAT(result.evicted, ElementsAre(2));
  EXPECT_NEAR(session.RankScore(1), high * e, 1e-6);
  EXPECT_NEAR(session.RankScore(3), low * e, 1e-6);
  EXPECT_NEAR(session.RankScore(4), high * std::exp(0.1), 1e-6);
  // Step 4: slot 5 is born under step 3's entropy, 0.5. Logits of 1, 3, 4, 5:
  // 1, 0, 1, 0. tova would evict 3 (tied with 5, older); birth keeps 3 (born
  // under entropy 1) and evicts 5 (born under 0.5).
  session.Append(5, 0.0f, 0.0f);
  result = session.Step(1.0f, 0.0f, /*entropy=*/2.0);
  EXPECT_NEAR(session.RankScore(3), low * e, 1e-6);
  EXPECT_NEAR(session.RankScore(5), low * std::exp(0.5), 1e-6);
  EXPECT_THAT(result.evicted, ElementsAre(5));
  EXPECT_THAT(session.Live(), ElementsAre(1, 3, 4));
}

TEST(BirthRankingTest, WeightZeroIsTovaAndTheEntropyIsRequired) {
  SessionConfig config =
      TinyConfig(Ranking::kBirth, BudgetControl::kFixed, /*budget=*/2);
  EXPECT_TRUE(PolicyNeedsEntropy(config));
  config.birth.weight = 0.0;
  SessionConfig tova = config;
  tova.ranking = Ranking::kTova;
  TinySession a(config), b(tova);
  for (int t = 0; t < 6; ++t) {
    a.Append(10 + t, 0.25f * t, 1.0f - 0.1f * t);
    b.Append(10 + t, 0.25f * t, 1.0f - 0.1f * t);
    const StepResult ra = a.Step(1.0f, -0.5f, /*entropy=*/0.3 * t);
    const StepResult rb = b.Step(1.0f, -0.5f, /*entropy=*/0.3 * t);
    EXPECT_EQ(ra.evicted, rb.evicted) << t;
    EXPECT_EQ(a.trace().rank_score, b.trace().rank_score) << t;
  }
  config.birth.weight = 101.0;
  const absl::Status st = ValidateSessionConfig(config);
  EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("birth.weight"));
}

// ---------------------------------------------------------------- rkv

// Keys (1, 0), (1, 0.05), (1, −0.05), (0, 1): with c = cos(k1, k2) =
// cos(k1, k3) and s = 0.05/‖(1, 0.05)‖, the rows of S (diagonal 0) are, after
// each row's most recent duplicate (cosine > 0.5) is zeroed:
//   row 1: duplicates 2, 3; 3 zeroed: (0, c, 0, 0)
//   row 2: duplicates 1, 3; 3 zeroed: (c, 0, 0, s)
//   row 3: duplicates 1, 2; 2 zeroed: (c, 0, 0, −s)
//   row 4: none:                      (0, s, −s, 0)
// so r = (2c, c + s, −s, 0) / 4 and R = softmax(r).
TEST(RkvRankingTest, EvictsTheMostRedundantKeyWhereTovaEvictsTheLeastAttended) {
  SessionConfig config =
      TinyConfig(Ranking::kRkv, BudgetControl::kFixed, /*budget=*/3);
  TinySession session(config);
  session.Append(1, 1.0f, 0.0f)
      .Append(2, 1.0f, 0.05f)
      .Append(3, 1.0f, -0.05f)
      .Append(4, 0.0f, 1.0f);
  // Query (1, 0): logits 1, 1, 1, 0; tova would evict 4.
  const StepResult result = session.Step(1.0f, 0.0f);
  EXPECT_THAT(result.evicted, ElementsAre(1));
  const double c = 1.0 / std::hypot(1.0, 0.05), s = 0.05 / std::hypot(1.0, 0.05);
  const double r[4] = {2 * c / 4, (c + s) / 4, -s / 4, 0.0};
  double sum = 0.0;
  for (double v : r) sum += std::exp(v);
  const double e = std::exp(1.0);
  const double a[4] = {e / (3 * e + 1), e / (3 * e + 1), e / (3 * e + 1),
                       1 / (3 * e + 1)};
  for (int i = 0; i < 4; ++i) {
    const double want = 0.1 * a[i] - 0.9 * std::exp(r[i]) / sum;
    EXPECT_NEAR(session.RankScore(i + 1), want, 1e-6) << i + 1;
  }
  EXPECT_NEAR(session.RankScore(1), -0.27079661, 1e-6);  // The worked value.
}

TEST(RkvRankingTest, ASampleOfReferenceRowsBoundsTheComparison) {
  // sample = 2 of 4 live: the rows of append rank 0 and 2 (entries 1 and 3):
  // row 1 (0, c, 0, 0), row 3 (c, 0, 0, −s): r = (c, c, 0, −s) / 2, so 1 and
  // 2 score alike.
  SessionConfig config =
      TinyConfig(Ranking::kRkv, BudgetControl::kFixed, /*budget=*/3);
  config.rkv.sample = 2;
  TinySession session(config);
  session.Append(1, 1.0f, 0.0f)
      .Append(2, 1.0f, 0.05f)
      .Append(3, 1.0f, -0.05f)
      .Append(4, 0.0f, 1.0f);
  const StepResult result = session.Step(0.0f, 0.0f);  // a_i = 1/4.
  EXPECT_THAT(result.evicted, ElementsAre(1));  // Tied with 2: the older.
  EXPECT_DOUBLE_EQ(session.RankScore(1), session.RankScore(2));
  const double c = 1.0 / std::hypot(1.0, 0.05), s = 0.05 / std::hypot(1.0, 0.05);
  const double r[4] = {c / 2, c / 2, 0.0, -s / 2};
  double sum = 0.0;
  for (double v : r) sum += std::exp(v);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(session.RankScore(i + 1),
                0.1 * 0.25 - 0.9 * std::exp(r[i]) / sum, 1e-6)
        << i + 1;
  }
}

TEST(RkvRankingTest, LambdaOneIsTovaAndBadParametersAreRefused) {
  SessionConfig config =
      TinyConfig(Ranking::kRkv, BudgetControl::kFixed, /*budget=*/4);
  config.rkv.lambda = 1.0;
  SessionConfig tova = config;
  tova.ranking = Ranking::kTova;
  TinySession a(config), b(tova);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (int t = 0; t < 40; ++t) {
    const float k0 = normal(rng), k1 = normal(rng);
    a.Append(10 + t, k0, k1);
    b.Append(10 + t, k0, k1);
    const float x = normal(rng), y = normal(rng);
    ASSERT_EQ(a.Step(x, y).evicted, b.Step(x, y).evicted) << t;
    ASSERT_EQ(a.trace().rank_score, b.trace().rank_score) << t;
  }
  for (double bad : {-0.1, 1.5, std::nan("")}) {
    config.rkv.lambda = bad;
    const absl::Status st = ValidateSessionConfig(config);
    EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(st.message(), ::testing::HasSubstr("rkv.lambda"));
  }
  config.rkv.lambda = 0.1;
  for (int64_t bad : {int64_t{0}, int64_t{65537}}) {
    config.rkv.sample = bad;
    const absl::Status st = ValidateSessionConfig(config);
    EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(st.message(), ::testing::HasSubstr("rkv.sample"));
  }
  config.rkv.sample = 64;
  config.shape.query_form = QueryForm::kGroupSum;
  EXPECT_THAT(ValidateSessionConfig(config).message(),
              ::testing::HasSubstr("shape.query_form"));
}

}  // namespace
}  // namespace entrokv
