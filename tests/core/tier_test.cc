// The demote tier (docs/step-semantics.md section 12): demotion instead of
// eviction, eviction for good when the tier overflows, promotion over a
// margin and at most P a step, the live count within the budget, and no
// change at all without a tier.
//
// Expected moves come from hand-worked scenarios (tova over a d = 2 shape,
// softmaxes computed here with std::exp) and from a brute-force reference of
// section 12 written in this file from the document (the `random` ranking,
// whose keep score needs no key, with its own SplitMix64 and budget
// controller), never from the code under test.

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

// ---------------------------------------------------------------------------
// A brute-force reference of section 12 for the `random` ranking, whose keep
// score u(seed, index, step) reads no key, so the reference needs none.

uint64_t RefSplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double RefRandomKeep(uint64_t seed, int64_t index, uint64_t step) {
  const uint64_t x =
      seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(index) + 1) +
      0xD1B54A32D192ED03ull * step;
  return static_cast<double>(RefSplitMix64(x) >> 11) / 9007199254740992.0;
}

class ReferenceTier {
 public:
  explicit ReferenceTier(const SessionConfig& c) : c_(c), budget_(c.budget) {}

  enum State { kLive, kDemoted, kGone };
  struct Entry {
    uint64_t slot;
    int64_t index;
    bool pinned;
    State state;
  };
  struct Answer {
    std::vector<uint64_t> demoted, promoted, evicted;
    int64_t live = 0;
    int64_t budget = 0;
    bool deferred = false;
    int64_t protected_live = 0;
  };

  Answer Step(uint64_t step, const std::vector<std::pair<uint64_t, bool>>& add,
              double entropy) {
    const int64_t live_before = Count(kLive);
    for (const auto& [slot, pinned] : add) {
      entries_.push_back({slot, next_index_++, pinned, kLive});
    }
    ++steps_;
    const int64_t n = static_cast<int64_t>(add.size());
    const bool decide =
        steps_ % c_.decide_every == 0 ||
        (c_.hard_ceiling > 0 && live_before + n > c_.hard_ceiling);
    Answer answer;
    if (!decide) {
      answer.deferred = true;
      answer.live = Count(kLive);
      answer.budget = budget_;
      return answer;
    }
    budget_ = Budget(entropy);
    const std::vector<State> start = States();
    std::vector<Entry*> live, tier;
    for (Entry& e : entries_) {
      if (e.state == kLive && !Protected(e)) live.push_back(&e);
      if (e.state == kDemoted) tier.push_back(&e);
    }
    auto weaker = [&](const Entry* a, const Entry* b) {
      const double ka = Keep(*a, step), kb = Keep(*b, step);
      return ka < kb || (ka == kb && a->index < b->index);
    };
    // Step 4.
    std::sort(live.begin(), live.end(), weaker);
    int64_t live_count = Count(kLive);
    const int64_t need = live_count - budget_;
    const int64_t down =
        std::clamp<int64_t>(need, 0, static_cast<int64_t>(live.size()));
    for (int64_t i = 0; i < down; ++i) live[i]->state = kDemoted;
    live_count -= down;
    // Step 5.
    std::sort(tier.begin(), tier.end(),
              [&](const Entry* a, const Entry* b) { return weaker(b, a); });
    size_t w = static_cast<size_t>(down);
    for (int64_t j = 0;
         j < c_.tier.max_promotions && j < static_cast<int64_t>(tier.size());
         ++j) {
      Entry* t = tier[j];
      if (live_count < budget_) {
        ++live_count;
      } else if (w < live.size() &&
                 Keep(*t, step) >
                     Keep(*live[w], step) + c_.tier.promote_margin) {
        live[w++]->state = kDemoted;
      } else {
        break;
      }
      t->state = kLive;
    }
    // Step 6.
    std::vector<Entry*> now;
    for (Entry& e : entries_) {
      if (e.state == kDemoted) now.push_back(&e);
    }
    std::sort(now.begin(), now.end(), weaker);
    const int64_t excess = static_cast<int64_t>(now.size()) - c_.tier.capacity;
    for (int64_t i = 0; i < excess; ++i) now[i]->state = kGone;
    // Step 7: net moves, read off the states, in append order.
    for (size_t i = 0; i < entries_.size(); ++i) {
      const State from = start[i], to = entries_[i].state;
      if (from == to) continue;
      if (to == kGone) answer.evicted.push_back(entries_[i].slot);
      if (from == kLive && to == kDemoted) {
        answer.demoted.push_back(entries_[i].slot);
      }
      if (from == kDemoted && to == kLive) {
        answer.promoted.push_back(entries_[i].slot);
      }
    }
    std::erase_if(entries_, [](const Entry& e) { return e.state == kGone; });
    answer.live = Count(kLive);
    answer.budget = budget_;
    for (const Entry& e : entries_) {
      answer.protected_live += e.state == kLive && Protected(e) ? 1 : 0;
    }
    return answer;
  }

  std::vector<uint64_t> Slots(State state) const {
    std::vector<uint64_t> out;
    for (const Entry& e : entries_) {
      if (e.state == state) out.push_back(e.slot);
    }
    return out;
  }

 private:
  int64_t Count(State state) const {
    return std::count_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return e.state == state; });
  }
  std::vector<State> States() const {
    std::vector<State> out;
    for (const Entry& e : entries_) out.push_back(e.state);
    return out;
  }
  bool Protected(const Entry& e) const {
    return e.pinned || e.index < c_.protection.sinks ||
           e.index >= next_index_ - c_.protection.recent;
  }
  double Keep(const Entry& e, uint64_t step) const {
    return RefRandomKeep(c_.seed, e.index, step);
  }
  // Section 6.
  int64_t Budget(double h) {
    if (c_.budget_control != BudgetControl::kEntropy) return c_.budget;
    const EntropyBudgetParams& p = c_.entropy_budget;
    if (!started_) {
      started_ = true;
      mean_ = h;
      var_ = 0.0;
    }
    const double z = (h - mean_) / (std::sqrt(var_) + p.epsilon);
    const double raw =
        static_cast<double>(c_.budget) * (1.0 + p.gamma * std::tanh(z));
    const int64_t lo = p.min_budget > 0 ? p.min_budget : 1;
    const int64_t hi =
        p.max_budget > 0 ? p.max_budget
                         : static_cast<int64_t>(std::ceil(
                               static_cast<double>(c_.budget) * (1 + p.gamma)));
    const int64_t b = std::clamp<int64_t>(std::llround(raw), lo, hi);
    const double d = h - mean_;
    var_ = (1 - p.ema_rate) * (var_ + p.ema_rate * d * d);
    mean_ += p.ema_rate * d;
    return b;
  }

  const SessionConfig c_;
  std::vector<Entry> entries_;  // Held, in append order.
  int64_t next_index_ = 0;
  int64_t steps_ = 0;
  int64_t budget_;  // The last decision's B_t; the budget before any.
  bool started_ = false;
  double mean_ = 0.0;
  double var_ = 0.0;
};

// (budget control, decide_every, hard_ceiling, capacity, max_promotions,
// margin, sinks, recent)
using ReferenceParam = std::tuple<BudgetControl, int32_t, int64_t, int64_t,
                                  int64_t, double, int64_t, int64_t>;

class TierReferenceTest : public ::testing::TestWithParam<ReferenceParam> {};

TEST_P(TierReferenceTest, MatchesABruteForceReferenceOfSection12) {
  const auto [control, every, ceiling, capacity, p, margin, sinks, recent] =
      GetParam();
  SessionConfig config = TinyConfig(Ranking::kRandom, control, /*budget=*/6);
  config.seed = 17;
  config.decide_every = every;
  config.hard_ceiling = ceiling;
  config.tier = {
      .capacity = capacity, .promote_margin = margin, .max_promotions = p};
  config.protection = {.sinks = sinks, .recent = recent};
  TinySession s(config);
  ReferenceTier ref(config);
  std::mt19937_64 rng(capacity * 1000 + p * 100 + every * 10 + sinks);
  uint64_t slot = 100;
  int64_t promoted = 0, demoted = 0, evicted = 0;
  for (uint64_t step = 1; step <= 120; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    std::vector<std::pair<uint64_t, bool>> add;
    const int n = step % 37 == 1 ? 12 : static_cast<int>(rng() % 4);
    // One pinned entry: more would soon fill the budget on their own.
    for (int e = 0; e < n; ++e, ++slot) add.push_back({slot, slot == 103});
    for (const auto& [id, pinned] : add) s.Append(id, 0.5f, -0.25f, pinned);
    const double h = 0.5 + static_cast<double>(rng() % 64) / 16.0;
    const StepResult r = s.Step(0.3f, 0.1f, h);
    const ReferenceTier::Answer want = ref.Step(step, add, h);
    ASSERT_EQ(r.deferred, want.deferred);
    ASSERT_EQ(r.budget, want.budget);
    ASSERT_EQ(r.demoted, want.demoted);
    ASSERT_EQ(r.promoted, want.promoted);
    ASSERT_EQ(r.evicted, want.evicted);
    ASSERT_EQ(r.live, want.live);
    ASSERT_EQ(s.Live(), ref.Slots(ReferenceTier::kLive));
    ASSERT_EQ(s.session().DemotedSlots(), ref.Slots(ReferenceTier::kDemoted));
    ASSERT_LE(static_cast<int64_t>(ref.Slots(ReferenceTier::kDemoted).size()),
              capacity);
    if (!r.deferred) {
      // Within the budget, unless protected entries alone exceed it.
      ASSERT_LE(r.live, std::max(r.budget, want.protected_live));
      ASSERT_LE(static_cast<int64_t>(r.promoted.size()), p);
    }
    promoted += static_cast<int64_t>(r.promoted.size());
    demoted += static_cast<int64_t>(r.demoted.size());
    evicted += static_cast<int64_t>(r.evicted.size());
  }
  const SessionStats stats = s.session().Stats();
  EXPECT_EQ(stats.promoted, promoted);
  EXPECT_EQ(stats.demoted, demoted);
  EXPECT_EQ(stats.evicted, evicted);
  EXPECT_EQ(stats.tier_held,
            static_cast<int64_t>(ref.Slots(ReferenceTier::kDemoted).size()));
  EXPECT_EQ(stats.bytes_held, (stats.live + stats.tier_held) * (8 + 40));
  // The runs do what they are meant to test.
  if (p > 0) {
    EXPECT_GT(promoted, 0);
  }
  EXPECT_GT(demoted, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Runs, TierReferenceTest,
    ::testing::Values(
        // Fixed budget: plain, small tier, a margin, no promotions.
        ReferenceParam{BudgetControl::kFixed, 1, 0, 4, 2, 0.0, 0, 0},
        ReferenceParam{BudgetControl::kFixed, 1, 0, 1, 1, 0.0, 0, 0},
        ReferenceParam{BudgetControl::kFixed, 1, 0, 16, 3, 0.25, 0, 0},
        ReferenceParam{BudgetControl::kFixed, 1, 0, 8, 0, 0.0, 0, 0},
        ReferenceParam{BudgetControl::kFixed, 1, 0, 1000, 100, 0.0, 0, 0},
        // Protection.
        ReferenceParam{BudgetControl::kFixed, 1, 0, 6, 2, 0.1, 2, 2},
        ReferenceParam{BudgetControl::kFixed, 1, 0, 6, 4, 0.0, 0, 4},
        // The entropy budget: room fills.
        ReferenceParam{BudgetControl::kEntropy, 1, 0, 5, 2, 0.0, 0, 0},
        ReferenceParam{BudgetControl::kEntropy, 1, 0, 12, 6, 0.4, 1, 1},
        // A cadence, with and without a hard ceiling.
        ReferenceParam{BudgetControl::kFixed, 3, 0, 5, 2, 0.0, 0, 0},
        ReferenceParam{BudgetControl::kFixed, 4, 9, 3, 1, 0.05, 1, 0},
        ReferenceParam{BudgetControl::kEntropy, 2, 8, 7, 3, 0.0, 0, 1}),
    [](const auto& info) {
      const ReferenceParam& r = info.param;
      return absl::StrCat(std::string(BudgetControlName(std::get<0>(r))),
                          "_every", std::get<1>(r), "_ceiling", std::get<2>(r),
                          "_D", std::get<3>(r), "_P", std::get<4>(r), "_m",
                          static_cast<int>(std::get<5>(r) * 100), "_sinks",
                          std::get<6>(r), "_recent", std::get<7>(r));
    });

// With no promotions and a tier that never fills, a ranking whose keep score
// does not depend on the other held entries (random, keynorm) keeps exactly
// the live set a session without a tier keeps, and demotes exactly what it
// evicts.
TEST(TierTest, DemotionsAreTheEvictionsOfASessionWithoutATier) {
  for (Ranking ranking : {Ranking::kRandom, Ranking::kKeyNorm}) {
    SCOPED_TRACE(std::string(RankingName(ranking)));
    SessionConfig plain = TinyConfig(ranking, BudgetControl::kFixed, 5);
    plain.protection.recent = 1;
    SessionConfig tiered = plain;
    tiered.tier = {
        .capacity = 1000, .promote_margin = 0.0, .max_promotions = 0};
    TinySession a(plain), b(tiered);
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    uint64_t slot = 0;
    for (int step = 1; step <= 60; ++step) {
      const int n = step == 1 ? 9 : static_cast<int>(rng() % 3);
      for (int e = 0; e < n; ++e) {
        const float k0 = u(rng), k1 = u(rng);
        a.Append(slot, k0, k1);
        b.Append(slot, k0, k1);
        ++slot;
      }
      const float x = u(rng), y = u(rng);
      const StepResult ra = a.Step(x, y), rb = b.Step(x, y);
      ASSERT_EQ(rb.demoted, ra.evicted) << "step " << step;
      ASSERT_THAT(rb.evicted, IsEmpty());
      ASSERT_EQ(a.Live(), b.Live());
    }
  }
}

// Every ranking that takes a tier, over random keys and queries on a GQA
// shape: the moves are consistent with the sets before and after, the tier
// stays within D and the live count within B_t, at most P are promoted, and
// (traced) every held entry's a_i is the naive reference's softmax over the
// held set.
TEST(TierTest, EveryRankingKeepsTheInvariantsAndScoresTheHeldSet) {
  for (Ranking ranking : kAllRankings) {
    if (!RankingHasScores(ranking)) continue;
    for (BudgetControl control :
         {BudgetControl::kFixed, BudgetControl::kEntropy}) {
      for (int32_t every : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(std::string(RankingName(ranking)), "+",
                                  std::string(BudgetControlName(control)),
                                  " every ", every));
        SessionConfig config;
        config.shape.layers = 2;
        config.shape.kv_heads = 2;
        config.shape.q_heads = 4;
        config.shape.head_dim = 4;
        config.shape.element_type = ElementType::kF32;
        config.budget = 8;
        config.ranking = ranking;
        config.budget_control = control;
        config.decide_every = every;
        config.protection.recent = 2;
        config.tier = {
            .capacity = 5, .promote_margin = 0.01, .max_promotions = 2};
        auto backend = CreateBackend(BackendKind::kCpu);
        ASSERT_OK(backend);
        ASSERT_OK_AND_ASSIGN(auto session,
                             (*backend)->CreateSession(config, {}));
        std::mt19937_64 rng(static_cast<uint64_t>(ranking) * 7 + every);
        std::normal_distribution<float> normal;
        std::map<uint64_t, std::vector<float>> keys;  // Every key, by slot.
        auto as_set = [](std::vector<uint64_t> v) {
          std::sort(v.begin(), v.end());
          return v;
        };
        uint64_t next_slot = 0;
        int64_t moved = 0;
        for (uint64_t step = 1; step <= 50; ++step) {
          SCOPED_TRACE(absl::StrCat("step ", step));
          const std::vector<uint64_t> live_before = session->LiveSlots();
          const std::vector<uint64_t> tier_before = session->DemotedSlots();
          StepBuilder builder(config.shape);
          std::vector<uint64_t> added;
          const int n = step == 1 ? 14 : static_cast<int>(rng() % 3);
          for (int e = 0; e < n; ++e) {
            std::vector<float> key(config.shape.key_elements());
            for (float& v : key) v = normal(rng);
            keys[next_slot] = key;
            builder.Append(next_slot, key);
            added.push_back(next_slot++);
          }
          std::vector<float> query(config.shape.query_elements());
          for (float& v : query) v = normal(rng);
          builder.Query(query).Entropy(0.5 + (rng() % 64) / 16.0);
          StepResult r;
          StepTrace trace;
          ASSERT_OK(session->Step(builder.Build(step), &r, &trace));
          // The sets before, moved by the lists, are the sets after.
          std::vector<uint64_t> live = live_before;
          live.insert(live.end(), added.begin(), added.end());
          std::vector<uint64_t> tier = tier_before;
          for (uint64_t id : r.demoted) {
            ASSERT_NE(std::find(live.begin(), live.end(), id), live.end());
            std::erase(live, id);
            tier.push_back(id);
          }
          for (uint64_t id : r.promoted) {
            ASSERT_NE(std::find(tier_before.begin(), tier_before.end(), id),
                      tier_before.end());
            std::erase(tier, id);
            live.push_back(id);
          }
          for (uint64_t id : r.evicted) {
            ASSERT_EQ(std::count(live.begin(), live.end(), id) +
                          std::count(tier.begin(), tier.end(), id),
                      1);
            std::erase(live, id);
            std::erase(tier, id);
          }
          ASSERT_EQ(as_set(session->LiveSlots()), as_set(live));
          ASSERT_EQ(as_set(session->DemotedSlots()), as_set(tier));
          ASSERT_EQ(r.live, static_cast<int64_t>(live.size()));
          ASSERT_LE(static_cast<int64_t>(tier.size()), config.tier.capacity);
          ASSERT_LE(static_cast<int64_t>(r.promoted.size()),
                    config.tier.max_promotions);
          moved += static_cast<int64_t>(r.promoted.size() + r.demoted.size());
          if (r.deferred) {
            ASSERT_TRUE(r.demoted.empty() && r.promoted.empty() &&
                        r.evicted.empty());
            continue;
          }
          ASSERT_LE(r.live, r.budget);
          // The trace lists the held set at the step's start (appends
          // included); its attention is the softmax over all of it.
          std::vector<uint64_t> held = live_before;
          held.insert(held.end(), tier_before.begin(), tier_before.end());
          held.insert(held.end(), added.begin(), added.end());
          ASSERT_EQ(as_set(trace.slots), as_set(held));
          ASSERT_EQ(trace.demoted.size(), trace.slots.size());
          std::vector<std::vector<float>> held_keys;
          for (size_t i = 0; i < trace.slots.size(); ++i) {
            const uint64_t id = trace.slots[i];
            const bool was_demoted =
                std::find(tier_before.begin(), tier_before.end(), id) !=
                tier_before.end();
            ASSERT_EQ(trace.demoted[i], was_demoted ? 1 : 0);
            held_keys.push_back(keys.at(id));
          }
          const ReferenceScores want =
              ComputeReferenceScores(config.shape, held_keys, query);
          for (size_t i = 0; i < held_keys.size(); ++i) {
            ASSERT_TRUE(Near(trace.attention[i], want.attention[i], 1e-5, 1e-7))
                << "slot " << trace.slots[i];
          }
        }
        EXPECT_GT(moved, 0);
      }
    }
  }
}

}  // namespace
}  // namespace entrokv::testing
