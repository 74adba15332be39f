// Each ranking on a tiny case whose evictions are computed by hand
// (docs/step-semantics.md sections 5, 7 and 8). One layer, one head, d = 2,
// f32. TinySession::Step(x, y) sends a query whose scaled score of key k is
// exactly x·k0 + y·k1, so the logits below can be read off the keys.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core_test_util.h"
#include "entrokv/core/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace entrokv {
namespace {

using ::entrokv::testing::Sigmoid;
using ::entrokv::testing::StepBuilder;
using ::entrokv::testing::TinyConfig;
using ::entrokv::testing::TinySession;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------- window

TEST(WindowRankingTest, EvictsTheOldestEntriesFirst) {
  TinySession session(TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 3));

  session.AppendZeros(10, 5);  // Slots 10..14, a prefill of five.
  StepResult result = session.StepFlat();
  EXPECT_THAT(result.evicted, ElementsAre(10, 11));
  EXPECT_EQ(result.live, 3);
  EXPECT_EQ(result.budget, 3);

  // A new entry with a large score changes nothing: only age counts.
  session.Append(20, 5.0f, 5.0f);
  result = session.Step(1.0f, 1.0f);
  EXPECT_THAT(result.evicted, ElementsAre(12));
  EXPECT_THAT(session.Live(), ElementsAre(13, 14, 20));
}

TEST(WindowRankingTest, EvictsNothingWithinBudget) {
  TinySession session(TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 3));
  session.AppendZeros(1, 3);
  StepResult result = session.StepFlat();
  EXPECT_THAT(result.evicted, IsEmpty());
  EXPECT_EQ(result.live, 3);
  // A step that appends nothing evicts nothing either.
  result = session.StepFlat();
  EXPECT_THAT(result.evicted, IsEmpty());
  EXPECT_THAT(session.Live(), ElementsAre(1, 2, 3));
}

TEST(WindowRankingTest, KeepScoreIsTheAppendIndex) {
  TinySession session(TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 8));
  session.AppendZeros(100, 3);
  session.StepFlat();
  session.AppendZeros(200, 2);
  session.StepFlat();
  EXPECT_THAT(session.trace().slots, ElementsAre(100, 101, 102, 200, 201));
  EXPECT_THAT(session.trace().rank_score, ElementsAre(0, 1, 2, 3, 4));
}

// ---------------------------------------------------------------- streaming

SessionConfig StreamingConfig(int64_t budget, int64_t sinks) {
  SessionConfig config =
      TinyConfig(Ranking::kStreaming, BudgetControl::kFixed, budget);
  config.streaming_sinks = sinks;
  return config;
}

TEST(StreamingRankingTest, KeepsTheFirstEntriesAndTheMostRecent) {
  TinySession session(StreamingConfig(/*budget=*/4, /*sinks=*/2));
  session.AppendZeros(0, 6);
  StepResult result = session.StepFlat();
  EXPECT_THAT(result.evicted, ElementsAre(2, 3));
  EXPECT_THAT(session.trace().rank_score,
              ElementsAre(kInf, kInf, 2, 3, 4, 5));

  session.AppendZeros(6, 1);
  result = session.StepFlat();
  EXPECT_THAT(result.evicted, ElementsAre(4));
  EXPECT_THAT(session.Live(), ElementsAre(0, 1, 5, 6));
}

TEST(StreamingRankingTest, SinksYieldOldestFirstOnlyWhenBudgetIsBelowSinks) {
  // Sinks are a keep score of +inf, not a protection: with budget 1 and two
  // sinks, the non-sink goes first, then the older sink (tie on +inf broken
  // by append index).
  TinySession session(StreamingConfig(/*budget=*/1, /*sinks=*/2));
  session.AppendZeros(0, 3);
  StepResult result = session.StepFlat();
  EXPECT_THAT(result.evicted, ElementsAre(0, 2));
  EXPECT_THAT(session.Live(), ElementsAre(1));
}

// ---------------------------------------------------------------- h2o / tova
//
// The story shared by H2O and TOVA, budget 3:
//   step 1: A=(ln 8, 0), B=(0, ln 2), C=(0, 0); query logits x·k0 with x = 1
//           -> z = (ln 8, 0, 0), a = (0.8, 0.1, 0.1). Nothing to evict.
//   step 2: D=(0, 0) appended; query y = 1 -> z = (0, ln 2, 0, 0),
//           a = (0.2, 0.4, 0.2, 0.2). One entry must go.
// H2O: acc = (1.0, 0.5, 0.3, 0.2); its recent share ceil(0.5·3) = 2 keeps C
//      and D; among A and B the lighter hitter is B.
// TOVA: the current attention ties A, C, D at 0.2; the oldest, A, goes.

class HeavyHitterStory {
 public:
  explicit HeavyHitterStory(const SessionConfig& config) : session_(config) {}

  StepResult FirstStepAttendsToA() {
    session_.Append(kA, std::log(8.0f), 0.0f)
        .Append(kB, 0.0f, std::log(2.0f))
        .Append(kC, 0.0f, 0.0f);
    return session_.Step(1.0f, 0.0f);
  }
  StepResult SecondStepAttendsToB() {
    session_.Append(kD, 0.0f, 0.0f);
    return session_.Step(0.0f, 1.0f);
  }
  TinySession& session() { return session_; }

  static constexpr uint64_t kA = 1, kB = 2, kC = 3, kD = 4;

 private:
  TinySession session_;
};

SessionConfig H2oConfig(int64_t budget, double recent_fraction) {
  SessionConfig config = TinyConfig(Ranking::kH2o, BudgetControl::kFixed,
                                    budget);
  config.h2o.recent_fraction = recent_fraction;
  return config;
}

TEST(H2oRankingTest, KeepsRecentShareAndHeaviestHitters) {
  HeavyHitterStory story(H2oConfig(/*budget=*/3, /*recent_fraction=*/0.5));
  using S = HeavyHitterStory;

  EXPECT_THAT(story.FirstStepAttendsToA().evicted, IsEmpty());
  // ceil(0.5 · 3) = 2 newest are kept outright; A holds its attention.
  EXPECT_NEAR(story.session().RankScore(S::kA), 0.8, 1e-6);
  EXPECT_EQ(story.session().RankScore(S::kB), kInf);
  EXPECT_EQ(story.session().RankScore(S::kC), kInf);

  const StepResult result = story.SecondStepAttendsToB();
  EXPECT_THAT(result.evicted, ElementsAre(S::kB));
  EXPECT_NEAR(story.session().RankScore(S::kA), 1.0, 1e-6);
  EXPECT_NEAR(story.session().RankScore(S::kB), 0.5, 1e-6);
  EXPECT_EQ(story.session().RankScore(S::kC), kInf);
  EXPECT_EQ(story.session().RankScore(S::kD), kInf);
  EXPECT_THAT(story.session().Live(), ElementsAre(S::kA, S::kC, S::kD));
}

TEST(H2oRankingTest, RecentShareRoundsUp) {
  // recent_fraction 0.4 of budget 3 is 1.2 -> 2 entries, not 1: C (acc 0.3,
  // the lightest) survives only because the share rounds up.
  HeavyHitterStory story(H2oConfig(/*budget=*/3, /*recent_fraction=*/0.4));
  story.FirstStepAttendsToA();
  EXPECT_THAT(story.SecondStepAttendsToB().evicted,
              ElementsAre(HeavyHitterStory::kB));
}

TEST(H2oRankingTest, WithoutRecentShareEvictsTheLightestAccumulator) {
  HeavyHitterStory story(H2oConfig(/*budget=*/3, /*recent_fraction=*/0.0));
  story.FirstStepAttendsToA();
  // acc = (1.0, 0.5, 0.3, 0.2): D, the newest, has gathered the least.
  EXPECT_THAT(story.SecondStepAttendsToB().evicted,
              ElementsAre(HeavyHitterStory::kD));
  EXPECT_NEAR(story.session().RankScore(HeavyHitterStory::kC), 0.3, 1e-6);
}

TEST(H2oRankingTest, RecentShareFollowsTheStepsBudget) {
  // h2o + entropy, B = 4, γ = 0.5: B_1 = 4, then an uncertain step gives
  // B_2 = 6 and a recent share of ceil(0.5 · 6) = 3 (not ceil(0.5 · 4) = 2).
  SessionConfig config =
      TinyConfig(Ranking::kH2o, BudgetControl::kEntropy, /*budget=*/4);
  config.h2o.recent_fraction = 0.5;
  config.entropy_budget.gamma = 0.5;
  TinySession session(config);
  session.AppendZeros(0, 4);  // Each gathers 1/4.
  EXPECT_EQ(session.StepFlat(/*entropy=*/1.0).budget, 4);
  // Step 2: slot 4 has key (−5, 0), all others score 0, so slot 4 gathers
  // almost nothing; but it is among the 3 newest, so the oldest of the
  // equally heavy first four goes instead.
  session.Append(4, -5, 0).AppendZeros(5, 2);
  const StepResult result = session.Step(1.0f, 0.0f, /*entropy=*/2.0);
  EXPECT_EQ(result.budget, 6);
  EXPECT_THAT(result.evicted, ElementsAre(0));
  EXPECT_EQ(session.RankScore(4), kInf);
}

TEST(TovaRankingTest, EvictsLowestCurrentAttentionOlderFirstOnTies) {
  HeavyHitterStory story(
      TinyConfig(Ranking::kTova, BudgetControl::kFixed, /*budget=*/3));
  story.FirstStepAttendsToA();
  EXPECT_NEAR(story.session().RankScore(HeavyHitterStory::kA), 0.8, 1e-6);
  const StepResult result = story.SecondStepAttendsToB();
  EXPECT_THAT(result.evicted, ElementsAre(HeavyHitterStory::kA));
  EXPECT_NEAR(story.session().RankScore(HeavyHitterStory::kB), 0.4, 1e-6);
  EXPECT_NEAR(story.session().RankScore(HeavyHitterStory::kD), 0.2, 1e-6);
}

TEST(TovaRankingTest, EvictsTheLowestAttentionEntries) {
  TinySession session(TinyConfig(Ranking::kTova, BudgetControl::kFixed, 2));
  // Logits 3, 1, 2, 0: the two lowest are slots 11 and 13.
  session.Append(10, 3, 0).Append(11, 1, 0).Append(12, 2, 0).Append(13, 0, 0);
  const StepResult result = session.Step(1.0f, 0.0f);
  EXPECT_THAT(result.evicted, ElementsAre(11, 13));
  const double total = std::exp(3.0) + std::exp(1.0) + std::exp(2.0) + 1.0;
  EXPECT_NEAR(session.RankScore(10), std::exp(3.0) / total, 1e-6);
  EXPECT_NEAR(session.RankScore(13), 1.0 / total, 1e-6);
}

// ---------------------------------------------------------------- keynorm

TEST(KeyNormRankingTest, EvictsTheLargestKeyNorms) {
  TinySession session(TinyConfig(Ranking::kKeyNorm, BudgetControl::kFixed, 2));
  session.Append(1, 3, 4).Append(2, 1, 0).Append(3, 0, 2);  // Norms 5, 1, 2.
  StepResult result = session.StepFlat();
  EXPECT_THAT(result.evicted, ElementsAre(1));
  EXPECT_THAT(session.trace().rank_score, ElementsAre(-5.0, -1.0, -2.0));

  session.Append(4, 0.0f, 0.5f);
  result = session.StepFlat();
  EXPECT_THAT(result.evicted, ElementsAre(3));
  EXPECT_THAT(session.Live(), ElementsAre(2, 4));
}

TEST(KeyNormRankingTest, NormIsTheMeanOverLayersAndHeadsOfPerHeadNorms) {
  SessionConfig config =
      TinyConfig(Ranking::kKeyNorm, BudgetControl::kFixed, 1);
  config.shape.layers = 2;
  config.shape.kv_heads = 1;
  config.shape.q_heads = 2;
  TinySession session(config);
  // X: layer 0 (3, 4), layer 1 (0, 0): mean of norms 2.5 (the concatenated
  //    norm would be 5).
  // Y: layer 0 (3, 0), layer 1 (0, 3): mean of norms 3 (concatenated 4.24).
  session.AppendKey(1, {3, 4, 0, 0}).AppendKey(2, {3, 0, 0, 3});
  const StepResult result = session.StepWithQuery(std::vector<float>(8, 0.0f));
  EXPECT_THAT(result.evicted, ElementsAre(2));
  EXPECT_THAT(session.trace().rank_score, ElementsAre(-2.5, -3.0));
}

TEST(KeyNormRankingTest, NormIsOfTheKeyAsStoredAfterRounding) {
  // 2049 is a tie between the f16 neighbours 2048 and 2050 and rounds to the
  // even 2048, so in f16 both keys have norm 2048 and the older goes; in f32
  // the larger norm, the newer, goes.
  for (const ElementType type : {ElementType::kF32, ElementType::kF16}) {
    SCOPED_TRACE(ElementTypeName(type));
    SessionConfig config =
        TinyConfig(Ranking::kKeyNorm, BudgetControl::kFixed, 1);
    config.shape.element_type = type;
    TinySession session(config);
    session.Append(1, 2048, 0).Append(2, 2049, 0);
    const StepResult result = session.StepFlat();
    EXPECT_THAT(result.evicted,
                ElementsAre(type == ElementType::kF16 ? 1u : 2u));
  }
}

// ---------------------------------------------------------------- random

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// u(seed, index, step) of docs/step-semantics.md section 7.
double RandomKeepScore(uint64_t seed, uint64_t index, uint64_t step) {
  const uint64_t x = seed + 0x9E3779B97F4A7C15ull * (index + 1) +
                     0xD1B54A32D192ED03ull * step;
  return static_cast<double>(SplitMix64(x) >> 11) * 0x1p-53;
}

// The `count` indices among `candidates` with the lowest u, in index order.
std::vector<uint64_t> LowestByU(const std::vector<uint64_t>& candidates,
                                uint64_t seed, uint64_t step, size_t count) {
  std::vector<uint64_t> sorted = candidates;
  std::sort(sorted.begin(), sorted.end(), [&](uint64_t a, uint64_t b) {
    const double ua = RandomKeepScore(seed, a, step);
    const double ub = RandomKeepScore(seed, b, step);
    return ua != ub ? ua < ub : a < b;
  });
  sorted.resize(count);
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

TEST(RandomRankingTest, SplitMix64MatchesItsPublishedFirstOutput) {
  // The reference generator's first output from state 0 (Vigna's splitmix64.c)
  // checks the helper below the other tests rely on.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
}

TEST(RandomRankingTest, EvictsTheLowestSeededDrawsAmongTheUnprotected) {
  constexpr uint64_t kSeed = 42;
  SessionConfig config =
      TinyConfig(Ranking::kRandom, BudgetControl::kFixed, /*budget=*/5);
  config.seed = kSeed;
  config.protection.sinks = 1;
  config.protection.recent = 1;
  TinySession session(config);

  // Step 1: indices 0..7 (slot = 100 + index); 0 and 7 are protected; three
  // of indices 1..6 must go.
  session.AppendZeros(100, 8);
  StepResult result = session.StepFlat();
  std::vector<uint64_t> expected =
      LowestByU({1, 2, 3, 4, 5, 6}, kSeed, /*step=*/1, 3);
  std::vector<uint64_t> expected_slots;
  for (uint64_t index : expected) expected_slots.push_back(100 + index);
  EXPECT_EQ(result.evicted, expected_slots);
  for (uint64_t index = 1; index <= 6; ++index) {
    EXPECT_EQ(session.RankScore(100 + index),
              RandomKeepScore(kSeed, index, 1))
        << "index " << index;
  }

  // Step 2: index 8 arrives (now the recent one); one survivor of 1..7 goes,
  // drawn afresh with step = 2.
  std::vector<uint64_t> candidates;
  for (uint64_t index = 1; index <= 7; ++index) {
    if (std::find(expected.begin(), expected.end(), index) == expected.end()) {
      candidates.push_back(index);
    }
  }
  session.AppendZeros(108, 1);
  result = session.StepFlat();
  const std::vector<uint64_t> second = LowestByU(candidates, kSeed, 2, 1);
  EXPECT_THAT(result.evicted, ElementsAre(100 + second[0]));
}

TEST(RandomRankingTest, SameSeedSameEvictionsOtherSeedOtherEvictions) {
  auto run = [](uint64_t seed) {
    SessionConfig config =
        TinyConfig(Ranking::kRandom, BudgetControl::kFixed, /*budget=*/8);
    config.seed = seed;
    TinySession session(config);
    std::vector<uint64_t> evicted;
    for (uint64_t slot = 0; slot < 64; ++slot) {
      session.AppendZeros(slot, 1);
      const StepResult result = session.StepFlat();
      evicted.insert(evicted.end(), result.evicted.begin(),
                     result.evicted.end());
    }
    return evicted;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

// ---------------------------------------------------------------- affinity
//
// Budget 3, β·H = 1 (β = 0.5, H = 2).
//   step 1: A=(2, 0), B=(0, 1), C=(0, 0); logits x = 1 -> s = (2, 0, 0).
//   step 2: D=(0, 0); logits x = −0.1, y = 0.5 -> s = (−0.2, 0.5, 0, 0).
// seed:      Ω after step 1 = (σ(2.5), σ(0.5), σ(0.5));
//            after step 2 = (σ(σ(2.5) − 0.2), σ(σ(0.5) + 0.5), σ(σ(0.5)),
//            σ(0.5)) ≈ (0.674, 0.754, 0.651, 0.622): D, new and flat, goes.
// logit_ema: a after step 1 = (2, 0, 0); after step 2 with λ = 0.9,
//            (1.6, 0.5, 0, 0): C and D tie at σ(0); the older, C, goes.
// TOVA would evict A, the lowest current score, in the same story.

class AffinityStory {
 public:
  explicit AffinityStory(AffinityUpdate update) : session_(Config(update)) {}

  static SessionConfig Config(AffinityUpdate update) {
    SessionConfig config =
        TinyConfig(Ranking::kAffinity, BudgetControl::kFixed, /*budget=*/3);
    config.affinity.update = update;
    config.affinity.beta = 0.5;
    config.affinity.lambda = 0.9;
    return config;
  }

  StepResult FirstStep() {
    session_.Append(kA, 2, 0).Append(kB, 0, 1).Append(kC, 0, 0);
    return session_.Step(1.0f, 0.0f, /*entropy=*/2.0);
  }
  StepResult SecondStep() {
    session_.Append(kD, 0, 0);
    return session_.Step(-0.1f, 0.5f, /*entropy=*/2.0);
  }
  TinySession& session() { return session_; }

  static constexpr uint64_t kA = 1, kB = 2, kC = 3, kD = 4;

 private:
  TinySession session_;
};

TEST(AffinityRankingTest, SeedUpdateSquashesHistoryThroughTheSigmoid) {
  AffinityStory story(AffinityUpdate::kSeed);
  using S = AffinityStory;
  TinySession& session = story.session();

  EXPECT_THAT(story.FirstStep().evicted, IsEmpty());
  EXPECT_NEAR(session.RankScore(S::kA), Sigmoid(2.5), 1e-6);
  EXPECT_NEAR(session.RankScore(S::kB), Sigmoid(0.5), 1e-6);
  EXPECT_NEAR(session.RankScore(S::kC), Sigmoid(0.5), 1e-6);

  const StepResult result = story.SecondStep();
  EXPECT_NEAR(session.RankScore(S::kA), Sigmoid(Sigmoid(2.5) - 0.2), 1e-6);
  EXPECT_NEAR(session.RankScore(S::kB), Sigmoid(Sigmoid(0.5) + 0.5), 1e-6);
  EXPECT_NEAR(session.RankScore(S::kC), Sigmoid(Sigmoid(0.5)), 1e-6);
  EXPECT_NEAR(session.RankScore(S::kD), Sigmoid(0.5), 1e-6);
  EXPECT_THAT(result.evicted, ElementsAre(S::kD));
  EXPECT_DOUBLE_EQ(result.entropy, 2.0);
}

TEST(AffinityRankingTest, LogitEmaAccumulatesEvidenceAndBreaksTiesByAge) {
  AffinityStory story(AffinityUpdate::kLogitEma);
  using S = AffinityStory;
  TinySession& session = story.session();

  EXPECT_THAT(story.FirstStep().evicted, IsEmpty());
  EXPECT_NEAR(session.RankScore(S::kA), Sigmoid(2.0), 1e-6);
  EXPECT_NEAR(session.RankScore(S::kB), 0.5, 1e-6);

  const StepResult result = story.SecondStep();
  EXPECT_NEAR(session.RankScore(S::kA), Sigmoid(0.9 * 2.0 - 0.2), 1e-6);
  EXPECT_NEAR(session.RankScore(S::kB), Sigmoid(0.5), 1e-6);
  EXPECT_DOUBLE_EQ(session.RankScore(S::kC), 0.5);
  EXPECT_DOUBLE_EQ(session.RankScore(S::kD), 0.5);
  EXPECT_THAT(result.evicted, ElementsAre(S::kC));
}

TEST(AffinityRankingTest, EntropyFromLogitsScalesTheUpdate) {
  // Two equal logits: H = ln 2. One entry, s = 1: Ω = σ(0.5 + ln 2) with the
  // seed rule and β = 1.
  SessionConfig config =
      TinyConfig(Ranking::kAffinity, BudgetControl::kFixed, /*budget=*/4);
  config.affinity.update = AffinityUpdate::kSeed;
  config.affinity.beta = 1.0;
  StepBuilder builder(config.shape);
  builder.Append(1, {1.0f, 0.0f})
      .Query({std::sqrt(2.0f), 0.0f})
      .Logits({3.0f, 3.0f});
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_TRUE(backend.ok());
  auto created = (*backend)->CreateSession(config, {});
  ASSERT_TRUE(created.ok()) << created.status();
  StepResult result;
  StepTrace trace;
  ASSERT_TRUE((*created)->Step(builder.Build(1), &result, &trace).ok());
  EXPECT_NEAR(result.entropy, std::log(2.0), 1e-9);
  ASSERT_EQ(trace.rank_score.size(), 1u);
  EXPECT_NEAR(trace.rank_score[0], Sigmoid(0.5 + std::log(2.0)), 1e-6);
}

}  // namespace
}  // namespace entrokv
