// The demote tier (docs/step-semantics.md section 12) against a brute-force
// reference of the section written in this file from the document (the
// `random` ranking, whose keep score needs no key, with its own SplitMix64
// and budget controller), and every ranking that takes a tier against the
// set invariants and a naive softmax over the held set. The hand-worked
// scenarios are in tier_test.cc.

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

using ::testing::IsEmpty;

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
