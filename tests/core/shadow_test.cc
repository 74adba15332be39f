// ShadowSet (core/include/entrokv/core/shadow.h). Expected recalls come from
// ComputeQuality (core/metrics.h, checked against the simulator), called on
// live flags the test derives itself from the policies' rules; Jaccards and
// counts are worked out by hand.

#include "entrokv/core/shadow.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::testing::HasSubstr;

// Recall is computed with core's f32 scoring kernel and vector exp (relative
// error < 2e-7, core/src/cpu_kernels.h), the references here in double.
constexpr double kRecallTolerance = 1e-6;

// 2 layers x 2 q heads over 1 kv head x d=4, f32: exact on the wire.
SessionConfig Window(int64_t budget) {
  SessionConfig c;
  c.shape = {.layers = 2,
             .kv_heads = 1,
             .q_heads = 2,
             .head_dim = 4,
             .element_type = ElementType::kF32};
  c.ranking = Ranking::kWindow;
  c.budget_control = BudgetControl::kFixed;
  c.budget = budget;
  return c;
}

class ShadowSetTest : public ::testing::Test {
 protected:
  static constexpr int kSteps = 12;

  void SetUp() override {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const Shape shape = Window(1).shape;
    keys_.resize(kSteps * shape.key_elements());
    queries_.resize(kSteps * shape.query_elements());
    for (float& x : keys_) x = normal(rng);
    for (float& x : queries_) x = normal(rng);
  }

  StepInput Input(int t, const uint64_t* slot, bool with_queries = true) {
    const Shape shape = Window(1).shape;
    StepInput in;
    in.step = static_cast<uint64_t>(t);
    in.append.slot_ids = absl::MakeConstSpan(slot, 1);
    in.append.keys = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(keys_.data() +
                                           t * shape.key_elements()),
        shape.key_elements() * sizeof(float));
    if (with_queries) {
      in.queries = absl::MakeConstSpan(
          reinterpret_cast<const std::byte*>(queries_.data() +
                                             t * shape.query_elements()),
          shape.query_elements() * sizeof(float));
    }
    return in;
  }

  // Attention recall at step t of the entries whose append index passes
  // `live`, over the t + 1 entries appended so far.
  double ExpectedRecall(int t, const std::function<bool(int)>& live) const {
    const Shape shape = Window(1).shape;
    std::vector<uint8_t> flags(t + 1);
    for (int i = 0; i <= t; ++i) flags[i] = live(i) ? 1 : 0;
    const absl::Span<const float> keys(keys_.data(),
                                       (t + 1) * shape.key_elements());
    return ComputeQuality(
               shape, keys, keys,
               absl::MakeConstSpan(
                   queries_.data() + t * shape.query_elements(),
                   shape.query_elements()),
               flags)
        .attention_recall;
  }

  static RecallSummary Summarize(std::vector<double> v) {
    RecallSummary s;
    s.steps = static_cast<int64_t>(v.size());
    double sum = 0;
    for (double x : v) sum += x;
    s.mean = sum / v.size();
    std::sort(v.begin(), v.end());
    s.min = v.front();
    s.p10 = v[static_cast<size_t>(std::ceil(0.1 * v.size())) - 1];
    return s;
  }

  static void ExpectSummary(const RecallSummary& got,
                            const RecallSummary& want) {
    EXPECT_EQ(got.steps, want.steps);
    EXPECT_NEAR(got.mean, want.mean, kRecallTolerance);
    EXPECT_NEAR(got.p10, want.p10, kRecallTolerance);
    EXPECT_NEAR(got.min, want.min, kRecallTolerance);
  }

  std::vector<float> keys_, queries_;
};

TEST_F(ShadowSetTest, RecallAndJaccardMatchAnIndependentComputation) {
  const SessionConfig primary = Window(3);
  ShadowOptions options;
  options.policies = {Window(2)};
  ASSERT_OK_AND_ASSIGN(auto shadows, ShadowSet::Create(primary, options));
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(primary, {}));
  std::vector<double> want_primary, want_shadow, want_oracle;
  for (int t = 0; t < kSteps; ++t) {
    const uint64_t slot = 100 + t;
    const StepInput in = Input(t, &slot);
    StepResult result;
    ASSERT_OK(session->Step(in, &result));
    StepRecall scored;
    ASSERT_TRUE(shadows->Observe(in, result, &scored));
    // window keeps the newest `budget` entries.
    want_primary.push_back(ExpectedRecall(t, [&](int i) { return i > t - 3; }));
    want_shadow.push_back(ExpectedRecall(t, [&](int i) { return i > t - 2; }));
    EXPECT_NEAR(scored.primary, want_primary.back(), kRecallTolerance) << t;
    ASSERT_EQ(scored.shadows.size(), 1u);
    EXPECT_NEAR(scored.shadows[0], want_shadow.back(), kRecallTolerance) << t;
    // The oracle: the 3 entries of the largest single-entry recall.
    std::vector<double> each;
    for (int i = 0; i <= t; ++i) {
      each.push_back(ExpectedRecall(t, [&](int j) { return j == i; }));
    }
    std::sort(each.begin(), each.end(), std::greater<double>());
    double top = 0;
    for (int i = 0; i < std::min(3, t + 1); ++i) top += each[i];
    want_oracle.push_back(top);
    EXPECT_NEAR(scored.oracle, top, kRecallTolerance) << t;
  }
  const ShadowStats stats = shadows->Stats();
  ExpectSummary(stats.primary.recall, Summarize(want_primary));
  ExpectSummary(stats.oracle.recall, Summarize(want_oracle));
  ASSERT_EQ(stats.shadows.size(), 1u);
  ExpectSummary(stats.shadows[0].recall, Summarize(want_shadow));
  // Jaccard of the newest 2 with the newest 3: 1, 2/2 at steps 0-1, then
  // 2/3 for the remaining 10 steps.
  EXPECT_NEAR(stats.shadows[0].mean_jaccard, (2.0 + 10.0 * 2.0 / 3.0) / 12.0,
              1e-12);
  EXPECT_EQ(stats.primary.policy, "window+fixed");
  EXPECT_EQ(stats.shadows[0].live, 2);
  EXPECT_EQ(stats.primary.live, 3);
  EXPECT_LE(stats.primary.recall.mean, stats.oracle.recall.mean + 1e-12);
}

TEST_F(ShadowSetTest, KeyDiffAndExpectedRunAsShadowsAsTheyRunAlone) {
  // Each shadow's recall must be that of the live set a standalone session of
  // its policy holds after the same steps (slot id = append index here).
  const SessionConfig primary = Window(3);
  std::vector<SessionConfig> policies;
  for (const char* name : {"keydiff", "expected"}) {
    SessionConfig c = Window(3);
    ASSERT_OK(ApplyPolicyName(name, &c));
    c.budget = 3;
    policies.push_back(c);
  }
  ShadowOptions options;
  options.policies = policies;
  ASSERT_OK_AND_ASSIGN(auto shadows, ShadowSet::Create(primary, options));
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(primary, {}));
  std::vector<std::unique_ptr<SessionState>> alone;
  for (const SessionConfig& c : policies) {
    ASSERT_OK_AND_ASSIGN(auto a, backend->CreateSession(c, {}));
    alone.push_back(std::move(a));
  }
  std::vector<std::vector<double>> want(policies.size());
  for (int t = 0; t < kSteps; ++t) {
    const uint64_t slot = t;
    const StepInput in = Input(t, &slot);
    StepResult result;
    ASSERT_OK(session->Step(in, &result));
    StepRecall scored;
    ASSERT_TRUE(shadows->Observe(in, result, &scored));
    for (size_t p = 0; p < policies.size(); ++p) {
      StepResult r;
      ASSERT_OK(alone[p]->Step(in, &r));
      const std::vector<uint64_t> live = alone[p]->LiveSlots();
      want[p].push_back(ExpectedRecall(t, [&](int i) {
        return std::find(live.begin(), live.end(), uint64_t(i)) != live.end();
      }));
      EXPECT_NEAR(scored.shadows[p], want[p].back(), kRecallTolerance)
          << RankingName(policies[p].ranking) << " step " << t;
    }
  }
  const ShadowStats stats = shadows->Stats();
  ASSERT_EQ(stats.shadows.size(), 2u);
  for (size_t p = 0; p < policies.size(); ++p) {
    EXPECT_OK(stats.shadows[p].status);
    ExpectSummary(stats.shadows[p].recall, Summarize(want[p]));
  }
  EXPECT_EQ(stats.shadows[0].policy, "keydiff+fixed");
  EXPECT_EQ(stats.shadows[1].policy, "expected+fixed");
}

TEST_F(ShadowSetTest, ThePrimarysAnswersAreTheSameWithAndWithoutShadows) {
  SessionConfig primary = Window(4);
  ASSERT_OK(ApplyPolicyName("tova", &primary));
  primary.budget = 4;
  ShadowOptions options;
  options.policies = {Window(2), Window(6)};
  ASSERT_OK_AND_ASSIGN(auto shadows, ShadowSet::Create(primary, options));
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(auto alone, backend->CreateSession(primary, {}));
  ASSERT_OK_AND_ASSIGN(auto watched, backend->CreateSession(primary, {}));
  for (int t = 0; t < kSteps; ++t) {
    const uint64_t slot = t;
    const StepInput in = Input(t, &slot);
    StepResult a, b;
    ASSERT_OK(alone->Step(in, &a));
    ASSERT_OK(watched->Step(in, &b));
    shadows->Observe(in, b);
    EXPECT_EQ(a.evicted, b.evicted) << "step " << t;
    EXPECT_EQ(a.live, b.live);
    EXPECT_EQ(a.budget, b.budget);
  }
  EXPECT_EQ(shadows->Stats().primary.recall.steps, kSteps);
}

TEST_F(ShadowSetTest, TheReferenceCapIsEnforcedAndEndsScoring) {
  ShadowOptions options;
  options.max_reference_entries = 5;
  ASSERT_OK_AND_ASSIGN(auto shadows, ShadowSet::Create(Window(3), options));
  for (int t = 0; t < 8; ++t) {
    const uint64_t slot = t;
    StepResult result;
    result.budget = 3;
    if (t >= 3) result.evicted = {static_cast<uint64_t>(t - 3)};
    shadows->Observe(Input(t, &slot), result);
  }
  const ShadowStats stats = shadows->Stats();
  EXPECT_EQ(stats.reference_entries, 5);
  EXPECT_EQ(stats.reference_bytes, 5 * 2 * 1 * 4 * 4);
  EXPECT_TRUE(stats.reference_full);
  EXPECT_EQ(stats.primary.recall.steps, 5);  // Steps 0-4.
  EXPECT_EQ(stats.steps_observed, 8);
  EXPECT_EQ(stats.reference_capacity, 5);
  // The reference never grew past its cap while doubling, and the rest
  // (scratch, recall series) is small beside it.
  EXPECT_GE(shadows->bytes_held(), stats.reference_bytes);
  // The bound the server reserves, worked out by hand: 5 entries of a
  // 32-byte key, 8 bytes of a_i, 8 bytes of one layer's logits (2 query
  // heads) and 2 series x 16 bytes, and 64 bytes of queries.
  EXPECT_EQ(ShadowBytesAtMost(Window(3), options), 5 * (32 + 16 + 32) + 64);
  EXPECT_LE(shadows->bytes_held(), ShadowBytesAtMost(Window(3), options));
}

TEST_F(ShadowSetTest, ScoringEndsAfterAsManyStepsAsTheReferenceHolds) {
  ShadowOptions options;
  options.max_reference_entries = 4;
  ASSERT_OK_AND_ASSIGN(auto shadows, ShadowSet::Create(Window(3), options));
  const uint64_t slot = 7;
  StepResult result;
  result.budget = 3;
  shadows->Observe(Input(0, &slot), result);
  // Steps that append nothing: the reference stays at 1 entry, and scoring
  // stops after 4 of them (the bound on the recall series).
  for (int t = 1; t < 9; ++t) {
    StepInput in = Input(t, &slot);
    in.append = {};
    shadows->Observe(in, result);
  }
  const ShadowStats stats = shadows->Stats();
  EXPECT_EQ(stats.reference_entries, 1);
  EXPECT_EQ(stats.primary.recall.steps, 4);
  EXPECT_TRUE(stats.reference_full);
}

TEST_F(ShadowSetTest, ScoreEveryNScoresOneStepWithQueriesInN) {
  ShadowOptions options;
  options.score_every = 3;
  ASSERT_OK_AND_ASSIGN(auto shadows, ShadowSet::Create(Window(100), options));
  for (int t = 0; t < kSteps; ++t) {
    const uint64_t slot = t;
    StepResult result;
    result.budget = 100;
    // Odd steps carry no queries: never scored.
    shadows->Observe(Input(t, &slot, /*with_queries=*/t % 2 == 0), result);
  }
  // 6 steps with queries; the 1st and 4th of them are scored.
  EXPECT_EQ(shadows->Stats().primary.recall.steps, 2);
}

TEST_F(ShadowSetTest, AReusedSlotIdDoesNotCollideInAShadow) {
  // The primary (budget 1) evicts slot 7 at once and the engine reuses it;
  // the shadow (budget 4) still holds the first entry under its own id.
  ShadowOptions options;
  options.policies = {Window(4)};
  ASSERT_OK_AND_ASSIGN(auto shadows, ShadowSet::Create(Window(1), options));
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(Window(1), {}));
  const uint64_t slots[] = {7, 8, 7, 8};
  for (int t = 0; t < 4; ++t) {
    const StepInput in = Input(t, &slots[t]);
    StepResult result;
    ASSERT_OK(session->Step(in, &result));
    shadows->Observe(in, result);
  }
  const ShadowStats stats = shadows->Stats();
  ASSERT_OK(stats.shadows[0].status);
  EXPECT_EQ(stats.shadows[0].live, 4);
  EXPECT_EQ(stats.primary.live, 1);
}

// With a demote tier (docs/step-semantics.md section 12), only live entries
// count: the primary's live set is what its session lists as live after
// each step, and a tiered shadow's that of a standalone session of its
// policy (slot id = 100 + append index here).
TEST_F(ShadowSetTest, DemotedEntriesCountInNoRecall) {
  auto tiered = [](int64_t capacity, int64_t promotions) {
    SessionConfig c = Window(3);
    c.ranking = Ranking::kTova;
    c.tier = {.capacity = capacity,
              .promote_margin = 0.0,
              .max_promotions = promotions};
    return c;
  };
  const SessionConfig primary = tiered(2, 1);
  ShadowOptions options;
  options.policies = {tiered(4, 2)};
  ASSERT_OK_AND_ASSIGN(auto shadows, ShadowSet::Create(primary, options));
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(primary, {}));
  ASSERT_OK_AND_ASSIGN(auto alone,
                       backend->CreateSession(options.policies[0], {}));
  int64_t demoted = 0;
  for (int t = 0; t < kSteps; ++t) {
    const uint64_t slot = 100 + t;
    const StepInput in = Input(t, &slot);
    StepResult result, ignored;
    ASSERT_OK(session->Step(in, &result));
    ASSERT_OK(alone->Step(in, &ignored));
    demoted += static_cast<int64_t>(result.demoted.size());
    StepRecall scored;
    ASSERT_TRUE(shadows->Observe(in, result, &scored));
    auto live_in = [](const std::vector<uint64_t>& slots) {
      return [slots](int i) {
        return std::find(slots.begin(), slots.end(), 100u + i) != slots.end();
      };
    };
    EXPECT_NEAR(scored.primary,
                ExpectedRecall(t, live_in(session->LiveSlots())),
                kRecallTolerance)
        << t;
    ASSERT_EQ(scored.shadows.size(), 1u);
    EXPECT_NEAR(scored.shadows[0],
                ExpectedRecall(t, live_in(alone->LiveSlots())),
                kRecallTolerance)
        << t;
  }
  EXPECT_GT(demoted, 0);
  const ShadowStats stats = shadows->Stats();
  EXPECT_EQ(stats.primary.live, 3);
  EXPECT_EQ(stats.shadows[0].live, 3);
}

TEST_F(ShadowSetTest, AShadowThatCannotRunStopsWithoutTouchingThePrimary) {
  SessionConfig needs_entropy = Window(2);
  needs_entropy.budget_control = BudgetControl::kEntropy;
  ShadowOptions options;
  options.policies = {needs_entropy};
  ASSERT_OK_AND_ASSIGN(auto shadows, ShadowSet::Create(Window(2), options));
  for (int t = 0; t < 3; ++t) {
    const uint64_t slot = t;
    StepResult result;
    result.budget = 2;
    shadows->Observe(Input(t, &slot), result);  // No entropy sent.
  }
  const ShadowStats stats = shadows->Stats();
  EXPECT_EQ(stats.shadows[0].status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(stats.shadows[0].status.message(), HasSubstr("entropy"));
  EXPECT_EQ(stats.shadows[0].recall.steps, 0);
  EXPECT_EQ(stats.primary.recall.steps, 3);
}

TEST(ShadowOptionsTest, ABadShadowIsRefusedNamingTheField) {
  const SessionConfig primary = Window(4);
  ShadowOptions options;
  options.policies = {Window(4), Window(0)};
  absl::StatusOr<std::unique_ptr<ShadowSet>> set =
      ShadowSet::Create(primary, options);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(set.status().message(), HasSubstr("policies[1].budget"));

  SessionConfig other_shape = Window(4);
  other_shape.shape.head_dim = 8;
  options.policies = {other_shape};
  set = ShadowSet::Create(primary, options);
  EXPECT_THAT(set.status().message(), HasSubstr("policies[0].shape"));

  SessionConfig other_cadence = Window(4);
  other_cadence.decide_every = 2;
  options.policies = {other_cadence};
  set = ShadowSet::Create(primary, options);
  EXPECT_THAT(set.status().message(), HasSubstr("policies[0].decide_every"));

  options.policies.assign(5, Window(4));
  set = ShadowSet::Create(primary, options);
  EXPECT_THAT(set.status().message(), HasSubstr("policies: 5 given, at most 4"));

  options.policies.clear();
  options.max_reference_entries = 0;
  set = ShadowSet::Create(primary, options);
  EXPECT_THAT(set.status().message(), HasSubstr("max_reference_entries"));
}

TEST(ShadowOptionsTest, TheServersByteCapBoundsTheReference) {
  const SessionConfig primary = Window(4);  // 8 floats, 32 bytes a key.
  ShadowRequest request;
  request.policies = {Window(2)};
  request.score_every = 3;
  ShadowLimits limits;
  limits.max_shadows = 2;
  limits.max_reference_bytes = 32 * 100 + 31;
  ASSERT_OK_AND_ASSIGN(ShadowOptions o,
                       ResolveShadowOptions(primary, request, limits));
  EXPECT_EQ(o.max_reference_entries, 100);  // 0 asks for all there is.
  EXPECT_EQ(o.max_shadows, 2);
  EXPECT_EQ(o.score_every, 3);
  EXPECT_EQ(o.policies.size(), 1u);
  request.max_reference_entries = 40;
  ASSERT_OK_AND_ASSIGN(o, ResolveShadowOptions(primary, request, limits));
  EXPECT_EQ(o.max_reference_entries, 40);
  request.max_reference_entries = 1000;
  ASSERT_OK_AND_ASSIGN(o, ResolveShadowOptions(primary, request, limits));
  EXPECT_EQ(o.max_reference_entries, 100);

  limits.max_reference_bytes = 31;
  EXPECT_THAT(ResolveShadowOptions(primary, request, limits).status().message(),
              HasSubstr("max_reference_bytes"));
  limits.max_reference_bytes = 1 << 20;
  request.score_every = 0;
  EXPECT_THAT(ResolveShadowOptions(primary, request, limits).status().message(),
              HasSubstr("score_every: 0"));
  request.score_every = 1;
  request.max_reference_entries = -1;
  EXPECT_THAT(ResolveShadowOptions(primary, request, limits).status().message(),
              HasSubstr("max_reference_entries: -1"));
}

}  // namespace
}  // namespace entrokv
