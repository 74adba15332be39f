// The demote tier (docs/step-semantics.md section 12): demotion instead of
// eviction, eviction for good when the tier overflows, promotion over a
// margin and at most P a step, the live count within the budget, and no
// change at all without a tier.
//
// Expected moves come from hand-worked scenarios (tova over a d = 2 shape,
// softmaxes computed here with std::exp), never from the code under test;
// tier_reference_test.cc checks random runs against a brute-force reference.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core_test_util.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

SessionConfig TovaTier(int64_t budget, int64_t capacity, double margin,
                       int64_t max_promotions) {
  SessionConfig config =
      TinyConfig(Ranking::kTova, BudgetControl::kFixed, budget);
  config.tier = {.capacity = capacity,
                 .promote_margin = margin,
                 .max_promotions = max_promotions};
  return config;
}

// Softmax over the scaled logits `z` (section 3, one layer and head).
std::vector<double> Softmax(std::vector<double> z) {
  double max_z = -INFINITY;
  for (double v : z) max_z = std::max(max_z, v);
  double sum = 0.0;
  for (double v : z) sum += std::exp(v - max_z);
  for (double& v : z) v = std::exp(v - max_z) / sum;
  return z;
}

// Five entries whose keys (2, 0), (1, 0), (0, 0), (-1, 0), (-2, 0) give
// slots 1..5 the logits 2, 1, 0, -1, -2 under Step(1, 0) and the reverse
// under Step(-1, 0).
void AppendFive(TinySession& s) {
  s.Append(1, 2.0f, 0.0f)
      .Append(2, 1.0f, 0.0f)
      .Append(3, 0.0f, 0.0f)
      .Append(4, -1.0f, 0.0f)
      .Append(5, -2.0f, 0.0f);
}

// ---------------------------------------------------------------------------
// Hand-worked scenarios.

TEST(TierTest, DemotesWhatTheRankingWouldEvict) {
  TinySession tiered(TovaTier(/*budget=*/2, /*capacity=*/4, 0.0, 0));
  TinySession plain(TinyConfig(Ranking::kTova, BudgetControl::kFixed, 2));
  for (TinySession* s : {&tiered, &plain}) {
    s->Append(1, 1.0f, 0.0f).Append(2, 0.0f, 0.0f).Append(3, -1.0f, 0.0f);
  }
  // Logits 1, 0, -1: slot 3 has the least attention.
  const StepResult r = tiered.Step(1.0f, 0.0f);
  const StepResult p = plain.Step(1.0f, 0.0f);
  EXPECT_THAT(p.evicted, ElementsAre(3));
  EXPECT_THAT(r.demoted, ElementsAre(3));
  EXPECT_THAT(r.evicted, IsEmpty());
  EXPECT_THAT(r.promoted, IsEmpty());
  EXPECT_EQ(r.live, 2);
  EXPECT_THAT(tiered.Live(), ElementsAre(1, 2));
  EXPECT_THAT(tiered.session().DemotedSlots(), ElementsAre(3));
  const SessionStats stats = tiered.session().Stats();
  EXPECT_EQ(stats.live, 2);
  EXPECT_EQ(stats.tier_held, 1);
  EXPECT_EQ(stats.demoted, 1);
  EXPECT_EQ(stats.promoted, 0);
  EXPECT_EQ(stats.evicted, 0);
  EXPECT_EQ(stats.peak_live, 3);
  // Keys and state of all three stay: 8 bytes of f32 keys + 40 each.
  EXPECT_EQ(stats.bytes_held, 3 * (8 + 40));
}

TEST(TierTest, ScoresDemotedEntriesOverTheHeldSetAndPromotesOverTheMargin) {
  TinySession s(TovaTier(/*budget=*/2, /*capacity=*/4, /*margin=*/0.1, 1));
  s.Append(1, 1.0f, 0.0f).Append(2, 0.0f, 0.0f).Append(3, -1.0f, 0.0f);
  ASSERT_THAT(s.Step(1.0f, 0.0f).demoted, ElementsAre(3));
  // Now the query favours slot 3: logits -1, 0, 1 over the held set.
  const std::vector<double> a = Softmax({-1.0, 0.0, 1.0});
  ASSERT_GT(a[2], a[0] + 0.1);  // 0.665 > 0.090 + 0.1.
  const StepResult r = s.Step(-1.0f, 0.0f);
  // The trace lists every held entry, slot 3 flagged as demoted at the
  // step's start, with its share of the held set's attention.
  EXPECT_THAT(s.trace().slots, ElementsAre(1, 2, 3));
  EXPECT_THAT(s.trace().demoted, ElementsAre(0, 0, 1));
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(s.trace().rank_score[i], a[i], 1e-6) << "slot " << i + 1;
  }
  EXPECT_THAT(r.promoted, ElementsAre(3));
  EXPECT_THAT(r.demoted, ElementsAre(1));  // The weakest live entry.
  EXPECT_THAT(r.evicted, IsEmpty());
  EXPECT_EQ(r.live, 2);
  EXPECT_THAT(s.Live(), ElementsAre(2, 3));
  EXPECT_THAT(s.session().DemotedSlots(), ElementsAre(1));
  const SessionStats stats = s.session().Stats();
  EXPECT_EQ(stats.demoted, 2);
  EXPECT_EQ(stats.promoted, 1);
  EXPECT_EQ(stats.tier_held, 1);
}

// Hysteresis: the same swap, with the gap between the demoted entry and the
// weakest live one just below and just above the margin.
TEST(TierTest, DoesNotPromoteWithinTheMargin) {
  // Logits -0.25, 0, 0.25 for slots 1, 2, 3 at the second step.
  const std::vector<double> a = Softmax({-0.25, 0.0, 0.25});
  const double gap = a[2] - a[0];  // About 0.165.
  for (const auto& [margin, promotes] :
       {std::pair<double, bool>{gap + 0.01, false}, {gap - 0.01, true}}) {
    SCOPED_TRACE(absl::StrCat("margin ", margin));
    TinySession s(TovaTier(/*budget=*/2, /*capacity=*/4, margin, 1));
    s.Append(1, 1.0f, 0.0f).Append(2, 0.0f, 0.0f).Append(3, -1.0f, 0.0f);
    ASSERT_THAT(s.Step(1.0f, 0.0f).demoted, ElementsAre(3));
    const StepResult r = s.Step(-0.25f, 0.0f);
    if (promotes) {
      EXPECT_THAT(r.promoted, ElementsAre(3));
      EXPECT_THAT(r.demoted, ElementsAre(1));
      EXPECT_THAT(s.Live(), ElementsAre(2, 3));
    } else {
      EXPECT_THAT(r.promoted, IsEmpty());
      EXPECT_THAT(r.demoted, IsEmpty());
      EXPECT_THAT(s.Live(), ElementsAre(1, 2));
    }
    EXPECT_EQ(r.live, 2);
  }
}

TEST(TierTest, PromotesAtMostPBestFirst) {
  // Step 1 (logits 2, 1, 0, -1, -2) demotes 3, 4, 5. Step 2 reverses the
  // logits: the tier's best are 5, then 4, then 3; the weakest live are 1,
  // then 2. Each of 5, 4 beats its partner; 3 would beat nothing left.
  const std::map<int64_t,
                 std::pair<std::vector<uint64_t>, std::vector<uint64_t>>>
      want = {{0, {{}, {}}},
              {1, {{5}, {1}}},
              {2, {{4, 5}, {1, 2}}},
              {3, {{4, 5}, {1, 2}}}};  // No live entry left to swap with.
  for (const auto& [p, moves] : want) {
    SCOPED_TRACE(absl::StrCat("P = ", p));
    TinySession s(TovaTier(/*budget=*/2, /*capacity=*/8, 0.0, p));
    AppendFive(s);
    ASSERT_THAT(s.Step(1.0f, 0.0f).demoted, ElementsAre(3, 4, 5));
    const StepResult r = s.Step(-1.0f, 0.0f);
    EXPECT_EQ(r.promoted, moves.first);
    EXPECT_EQ(r.demoted, moves.second);
    EXPECT_THAT(r.evicted, IsEmpty());
    EXPECT_EQ(r.live, 2);
  }
}

TEST(TierTest, OverflowEvictsTheTiersWeakestForGood) {
  TinySession s(TovaTier(/*budget=*/2, /*capacity=*/1, 0.0, 0));
  AppendFive(s);
  // 3, 4, 5 go down; the tier holds one: 4 and 5, the weakest, go for good
  // and are answered only as evicted.
  StepResult r = s.Step(1.0f, 0.0f);
  EXPECT_THAT(r.demoted, ElementsAre(3));
  EXPECT_THAT(r.evicted, ElementsAre(4, 5));
  EXPECT_THAT(s.session().DemotedSlots(), ElementsAre(3));
  // A new entry with logit 0.5 is the weakest live one (1 and 2 have 2 and
  // 1): demoted, it outranks 3 (logit 0), which is dropped.
  s.Append(6, 0.5f, 0.0f);
  r = s.Step(1.0f, 0.0f);
  EXPECT_THAT(r.demoted, ElementsAre(6));
  EXPECT_THAT(r.evicted, ElementsAre(3));
  EXPECT_THAT(s.session().DemotedSlots(), ElementsAre(6));
  // A new entry with logit -3 is demoted and at once the tier's weakest:
  // dropped by the same step, it is only in `evicted`.
  s.Append(7, -3.0f, 0.0f);
  r = s.Step(1.0f, 0.0f);
  EXPECT_THAT(r.demoted, IsEmpty());
  EXPECT_THAT(r.evicted, ElementsAre(7));
  EXPECT_THAT(s.Live(), ElementsAre(1, 2));
  EXPECT_THAT(s.session().DemotedSlots(), ElementsAre(6));
  const SessionStats stats = s.session().Stats();
  EXPECT_EQ(stats.evicted, 4);
  EXPECT_EQ(stats.demoted, 2);
  EXPECT_EQ(stats.tier_held, 1);
  EXPECT_EQ(stats.bytes_held, 3 * (8 + 40));
}

// Room: when the entropy budget grows past the live count, the tier's best
// come back without displacing anything, whatever the margin.
TEST(TierTest, FillsRoomWhenTheBudgetGrows) {
  for (int64_t p : {1, 2, 8}) {
    SCOPED_TRACE(absl::StrCat("P = ", p));
    SessionConfig config =
        TinyConfig(Ranking::kTova, BudgetControl::kEntropy, /*budget=*/3);
    config.tier = {.capacity = 8, .promote_margin = 100.0, .max_promotions = p};
    TinySession s(config);
    AppendFive(s);
    // The first entropy sets the mean: B_1 = 3, so 4 and 5 go down.
    StepResult r = s.Step(1.0f, 0.0f, /*entropy=*/1.0);
    ASSERT_EQ(r.budget, 3);
    ASSERT_THAT(r.demoted, ElementsAre(4, 5));
    // A higher entropy: tanh(1 / 1e-3) = 1, B_2 = round(3 · 1.5) = 5, room
    // for two. Best first under logits 2, 1, 0, -1, -2: 4, then 5.
    r = s.Step(1.0f, 0.0f, /*entropy=*/2.0);
    ASSERT_EQ(r.budget, 5);
    EXPECT_THAT(r.demoted, IsEmpty());
    const std::vector<uint64_t> want =
        p == 1 ? std::vector<uint64_t>{4} : std::vector<uint64_t>{4, 5};
    EXPECT_EQ(r.promoted, want);
    EXPECT_EQ(r.live, p == 1 ? 4 : 5);
    EXPECT_LE(r.live, r.budget);
  }
}

TEST(TierTest, ProtectedEntriesAreNeverDemoted) {
  SessionConfig config = TovaTier(/*budget=*/2, /*capacity=*/4, 0.0, 4);
  config.protection.sinks = 1;
  TinySession s(config);
  // Slot 1, the sink, has the lowest logit; slot 4 is pinned.
  s.Append(1, -2.0f, 0.0f)
      .Append(2, 1.0f, 0.0f)
      .Append(3, 0.0f, 0.0f)
      .AppendPinned(4, -1.0f, 0.0f);
  StepResult r = s.Step(1.0f, 0.0f);
  EXPECT_THAT(r.demoted, ElementsAre(2, 3));  // All that may go.
  EXPECT_EQ(r.live, 2);
  // Slots 2 and 3 now far outscore the protected entries, which are the
  // only live ones: nothing can be swapped out for them.
  r = s.Step(1.0f, 0.0f);
  EXPECT_THAT(r.promoted, IsEmpty());
  EXPECT_THAT(r.demoted, IsEmpty());
  EXPECT_THAT(s.Live(), ElementsAre(1, 4));
}

TEST(TierTest, ADemotedSlotIdIsHeldAndCannotBeAppended) {
  TinySession s(TovaTier(/*budget=*/2, /*capacity=*/1, 0.0, 0));
  AppendFive(s);
  ASSERT_THAT(s.Step(1.0f, 0.0f).evicted, ElementsAre(4, 5));
  StepBuilder b(s.session().config().shape);
  b.Append(3, {0.0f, 0.0f}).Query({0.0f, 0.0f});  // 3 is in the tier.
  StepResult r;
  const absl::Status refused = s.session().Step(b.Build(2), &r);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("slot id 3 is already held (live or demoted)"));
  // An id evicted for good may come back. Held: logits 2, 1, 0 (3, in the
  // tier) and 0 (4): 4 is the weakest live entry and goes down; 3 and 4 then
  // tie in the tier, and the older, 3, is dropped (section 8's tie rule).
  s.Append(4, 0.0f, 0.0f);
  r = s.Step(1.0f, 0.0f);
  EXPECT_THAT(r.demoted, ElementsAre(4));
  EXPECT_THAT(r.evicted, ElementsAre(3));
}

TEST(TierTest, MaxLiveEntriesBoundsTheHeldEntries) {
  SessionLimits limits;
  limits.max_live_entries = 5;
  TinySession s(TovaTier(/*budget=*/2, /*capacity=*/4, 0.0, 0), limits);
  AppendFive(s);
  ASSERT_EQ(s.Step(1.0f, 0.0f).live, 2);  // 2 live + 3 demoted held.
  StepBuilder b(s.session().config().shape);
  b.Append(6, {0.0f, 0.0f}).Query({0.0f, 0.0f});
  StepResult r;
  const absl::Status refused = s.session().Step(b.Build(2), &r);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("5 held (live and demoted) + 1 new entries"));
}

TEST(TierTest, TheBackendCountsTheTiersBytesUntilTheSessionCloses) {
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_OK(backend);
  {
    ASSERT_OK_AND_ASSIGN(
        auto session,
        (*backend)->CreateSession(TovaTier(2, /*capacity=*/2, 0.0, 0), {}));
    StepBuilder b(TinyShape());
    for (uint64_t slot = 1; slot <= 5; ++slot) {
      b.Append(slot, {3.0f - static_cast<float>(slot), 0.0f});
    }
    b.Query({1.0f, 0.0f});
    StepResult r;
    ASSERT_OK(session->Step(b.Build(1), &r));
    EXPECT_THAT(r.evicted, ElementsAre(5));  // 3, 4 fit the tier.
    EXPECT_EQ((*backend)->bytes_held(), 4 * (8 + 40));
    EXPECT_EQ(session->Stats().bytes_held, 4 * (8 + 40));
  }
  EXPECT_EQ((*backend)->bytes_held(), 0);
}

TEST(TierTest, ADeferredStepMovesNothingAndCountsLiveApartFromTheTier) {
  SessionConfig config = TovaTier(/*budget=*/2, /*capacity=*/4, 0.0, 1);
  config.decide_every = 2;
  config.hard_ceiling = 3;
  TinySession s(config);
  AppendFive(s);
  // The first step passes the ceiling (0 + 5 > 3): a decision.
  StepResult r = s.Step(1.0f, 0.0f);
  ASSERT_THAT(r.demoted, ElementsAre(3, 4, 5));
  // The 2nd accepted step decides on schedule; the query swaps 5 in for 1.
  r = s.Step(-1.0f, 0.0f);
  ASSERT_THAT(r.promoted, ElementsAre(5));
  // The 3rd: deferred. 2 live + 1 appended = 3 is within the ceiling,
  // though 6 entries are held.
  s.Append(6, 0.0f, 0.0f);
  r = s.Step(-1.0f, 0.0f);
  EXPECT_TRUE(r.deferred);
  EXPECT_THAT(r.demoted, IsEmpty());
  EXPECT_THAT(r.promoted, IsEmpty());
  EXPECT_EQ(r.live, 3);
  EXPECT_EQ(s.session().Stats().live, 3);
  EXPECT_EQ(s.session().Stats().tier_held, 3);
  EXPECT_THAT(s.Live(), ElementsAre(2, 5, 6));
  EXPECT_THAT(s.session().DemotedSlots(), ElementsAre(1, 3, 4));
}

// ---------------------------------------------------------------------------
// Refusals.

TEST(TierTest, RefusesBadParametersAndPoliciesItCannotDefine) {
  struct Bad {
    std::string field;
    std::function<void(SessionConfig&)> corrupt;
  };
  const std::vector<Bad> bad = {
      {"tier.capacity", [](SessionConfig& c) { c.tier.capacity = -1; }},
      {"tier.capacity",
       [](SessionConfig& c) { c.tier.capacity = (int64_t{1} << 40) + 1; }},
      {"tier.promote_margin",
       [](SessionConfig& c) { c.tier.promote_margin = -0.5; }},
      {"tier.promote_margin",
       [](SessionConfig& c) { c.tier.promote_margin = NAN; }},
      {"tier.promote_margin",
       [](SessionConfig& c) { c.tier.promote_margin = INFINITY; }},
      {"tier.max_promotions",
       [](SessionConfig& c) { c.tier.max_promotions = -1; }},
      {"tier.capacity", [](SessionConfig& c) { c.ranking = Ranking::kWindow; }},
      {"tier.capacity",
       [](SessionConfig& c) { c.ranking = Ranking::kStreaming; }},
      {"tier.capacity",
       [](SessionConfig& c) { c.budget_control = BudgetControl::kThreshold; }},
      {"tier.capacity", [](SessionConfig& c) { c.block_size = 4; }},
      {"tier.capacity",
       [](SessionConfig& c) {
         c.block_size = 2;
         c.block_summary = true;
       }},
  };
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_OK(backend);
  for (const Bad& b : bad) {
    SessionConfig config = TovaTier(8, 4, 0.0, 1);
    b.corrupt(config);
    const absl::Status st = ValidateSessionConfig(config);
    EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(st.message()), HasSubstr(b.field + ":"));
    EXPECT_STATUS_CODE((*backend)->CreateSession(config, {}).status(),
                       absl::StatusCode::kInvalidArgument);
  }
  // Without a tier, those policies stand, and the parameters are still
  // checked.
  SessionConfig window = TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 8);
  window.tier.promote_margin = 0.5;
  EXPECT_OK(ValidateSessionConfig(window));
  window.tier.max_promotions = -2;
  EXPECT_STATUS_CODE(ValidateSessionConfig(window),
                     absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// No tier: nothing changes.

// A session whose tier is off but whose other tier fields are set answers
// exactly as a default one, over random runs of every ranking that takes a
// tier and of both budget controls, with a cadence and with traces.
TEST(TierTest, WithoutATierEveryAnswerIsUnchanged) {
  for (Ranking ranking : kAllRankings) {
    for (BudgetControl control :
         {BudgetControl::kFixed, BudgetControl::kEntropy}) {
      for (int32_t every : {1, 3}) {
        SCOPED_TRACE(absl::StrCat(std::string(RankingName(ranking)), "+",
                                  std::string(BudgetControlName(control)),
                                  " every ", every));
        SessionConfig base;
        base.shape.layers = 2;
        base.shape.kv_heads = 2;
        base.shape.q_heads = 4;
        base.shape.head_dim = 8;
        base.shape.element_type = ElementType::kF16;
        base.budget = 12;
        base.ranking = ranking;
        base.budget_control = control;
        base.decide_every = every;
        base.protection.recent = 2;
        SessionConfig off = base;
        off.tier = {.capacity = 0, .promote_margin = 0.7, .max_promotions = 3};
        auto backend = CreateBackend(BackendKind::kCpu);
        ASSERT_OK(backend);
        ASSERT_OK_AND_ASSIGN(auto a, (*backend)->CreateSession(base, {}));
        ASSERT_OK_AND_ASSIGN(auto b, (*backend)->CreateSession(off, {}));
        std::mt19937_64 rng(static_cast<uint64_t>(ranking) * 31 + every);
        std::normal_distribution<float> normal;
        uint64_t slot = 0;
        for (uint64_t step = 1; step <= 40; ++step) {
          StepBuilder builder(base.shape);
          const int n = step == 1 ? 20 : static_cast<int>(rng() % 3);
          for (int e = 0; e < n; ++e) {
            std::vector<float> key(base.shape.key_elements());
            for (float& v : key) v = normal(rng);
            builder.Append(slot++, key);
          }
          std::vector<float> query(base.shape.query_elements());
          for (float& v : query) v = normal(rng);
          builder.Query(query).Entropy(1.0 + (rng() % 100) / 50.0);
          const StepInput input = builder.Build(step);
          StepResult ra, rb;
          StepTrace ta, tb;
          ASSERT_OK(a->Step(input, &ra, &ta));
          ASSERT_OK(b->Step(input, &rb, &tb));
          EXPECT_EQ(ra.evicted, rb.evicted);
          EXPECT_EQ(ra.live, rb.live);
          EXPECT_EQ(ra.budget, rb.budget);
          EXPECT_EQ(ra.deferred, rb.deferred);
          EXPECT_THAT(rb.demoted, IsEmpty());
          EXPECT_THAT(rb.promoted, IsEmpty());
          EXPECT_EQ(ta.slots, tb.slots);
          EXPECT_EQ(ta.rank_score, tb.rank_score);
          EXPECT_EQ(ta.attention, tb.attention);
          EXPECT_THAT(tb.demoted, IsEmpty());
        }
        const SessionStats sa = a->Stats(), sb = b->Stats();
        EXPECT_EQ(sa.live, sb.live);
        EXPECT_EQ(sa.evicted, sb.evicted);
        EXPECT_EQ(sa.bytes_held, sb.bytes_held);
        EXPECT_EQ(sb.tier_held, 0);
        EXPECT_EQ(sb.demoted, 0);
        EXPECT_THAT(b->DemotedSlots(), IsEmpty());
        EXPECT_EQ(a->LiveSlots(), b->LiveSlots());
      }
    }
  }
}

}  // namespace
}  // namespace entrokv::testing
