// LiveSet: the client's record of live entries and its local streaming
// decision. Expected evictions are worked out by hand in each test.

#include "entrokv/client/live_set.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "entrokv/core/rule.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class LiveSetTest : public ::testing::Test {
 protected:
  // Appends slots first, first+1, ... (count of them), one step each.
  void AppendRange(uint64_t first, int count) {
    for (int i = 0; i < count; ++i) {
      const uint64_t id = first + i;
      ASSERT_OK(live_.CheckAppend({&id, 1}, {}));
      live_.Append({&id, 1}, {});
    }
  }

  LiveSet live_;
};

TEST_F(LiveSetTest, WithinBudgetEvictsNothing) {
  AppendRange(10, 4);
  EXPECT_THAT(live_.StreamingEvictions({.budget = 4}), IsEmpty());
}

TEST_F(LiveSetTest, EvictsOldestAfterTheSinks) {
  AppendRange(10, 8);  // Append indices 0..7 = slots 10..17.
  // Budget 5, sinks 2: keep indices 0, 1 and the newest three (5, 6, 7).
  EXPECT_THAT(live_.StreamingEvictions({.budget = 5, .sinks = 2}),
              ElementsAre(12, 13, 14));
}

TEST_F(LiveSetTest, NeverEvictsPinnedOrRecentEntries) {
  const std::vector<uint64_t> ids = {1, 2, 3, 4, 5, 6};
  const std::vector<uint8_t> pinned = {0, 1, 0, 0, 0, 0};
  ASSERT_OK(live_.CheckAppend(ids, pinned));
  live_.Append(ids, pinned);
  // Budget 2, recent 3: slots 4, 5, 6 are recent and 2 pinned; only 1 and 3
  // may go, and protected entries keep the live count above the budget.
  EXPECT_THAT(live_.StreamingEvictions({.budget = 2, .recent = 3}),
              ElementsAre(1, 3));
}

TEST_F(LiveSetTest, RemovedEntriesAreForgotten) {
  AppendRange(10, 6);
  const std::vector<uint64_t> gone = {11, 12, 99};
  EXPECT_EQ(live_.Remove(gone), 2);
  EXPECT_EQ(live_.size(), 4);
  EXPECT_THAT(live_.Slots(), ElementsAre(10, 13, 14, 15));
  // A removed id may be appended again; it is then the newest entry.
  const uint64_t again = 11;
  ASSERT_OK(live_.CheckAppend({&again, 1}, {}));
  live_.Append({&again, 1}, {});
  EXPECT_THAT(live_.StreamingEvictions({.budget = 3}), ElementsAre(10, 13));
}

TEST_F(LiveSetTest, EntriesListLiveSlotsWithTheirPinnedFlagsInAppendOrder) {
  const std::vector<uint64_t> ids = {7, 3, 9, 1};
  const std::vector<uint8_t> pinned = {0, 1, 0, 1};
  live_.Append(ids, pinned);
  const uint64_t late = 5;
  live_.Append({&late, 1}, {});
  const std::vector<uint64_t> gone = {9};
  live_.Remove(gone);
  std::vector<uint64_t> slots = {42};
  std::vector<uint8_t> flags = {42};
  live_.Entries(&slots, &flags);
  EXPECT_THAT(slots, ElementsAre(7, 3, 1, 5));
  EXPECT_THAT(flags, ElementsAre(0, 1, 1, 0));
}

TEST_F(LiveSetTest, BlocksAreEvictedWholeAndOnlyWhenFull) {
  AppendRange(100, 10);  // Blocks of 4: [100..103] [104..107] [108, 109].
  // Budget 5 (need 5): sinks 1 protects block 0, so block 1 then block 2...
  // but block 2 is not full. Only block 1 goes (live 6 > 5: best effort).
  EXPECT_THAT(
      live_.StreamingEvictions({.budget = 5, .sinks = 1, .block_size = 4}),
      ElementsAre(104, 105, 106, 107));
  // Without sinks, ceil(5 / 4) = 2 blocks: 0 and 1.
  EXPECT_THAT(live_.StreamingEvictions({.budget = 5, .block_size = 4}),
              ElementsAre(100, 101, 102, 103, 104, 105, 106, 107));
}

TEST_F(LiveSetTest, BlockWithAnEvictedTokenIsNoCandidate) {
  AppendRange(100, 12);
  const uint64_t gone = 101;
  live_.Remove({&gone, 1});
  // Block 0 lost a token (the server evicts blocks whole, so this only
  // happens after a token-level decision); block 1 is the oldest whole one.
  EXPECT_THAT(live_.StreamingEvictions({.budget = 8, .block_size = 4}),
              ElementsAre(104, 105, 106, 107));
}

TEST_F(LiveSetTest, RejectsDuplicateAndMismatchedAppends) {
  AppendRange(7, 1);
  const std::vector<uint64_t> live_again = {7};
  EXPECT_STATUS_CODE(live_.CheckAppend(live_again, {}),
                     absl::StatusCode::kInvalidArgument);
  const std::vector<uint64_t> twice = {8, 8};
  EXPECT_STATUS_CODE(live_.CheckAppend(twice, {}),
                     absl::StatusCode::kInvalidArgument);
  const std::vector<uint64_t> two = {8, 9};
  const std::vector<uint8_t> one_flag = {1};
  EXPECT_STATUS_CODE(live_.CheckAppend(two, one_flag),
                     absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(live_.size(), 1);
}

// The fail-open rule on shared vectors: the cases below, generated from a
// fixed SplitMix64 stream and answered by this library, are written in
// tests/fixtures/fallback_streaming.txt, which the Python client's tests
// replay against its own LiveSet (tests/python/test_fallback_fixture.py).
// The file must be what this code answers: regenerate it with
// ENTROKV_UPDATE_FIXTURES=1 after a deliberate change of the rule.
std::string FallbackFixture() {
  std::string out =
      "# The client libraries' fail-open streaming rule on shared vectors:\n"
      "# generated by tests/client/live_set_test.cc (FallbackFixture), replayed\n"
      "# by tests/python/test_fallback_fixture.py.\n"
      "# case BUDGET SINKS RECENT BLOCK_SIZE; then per step the appended\n"
      "# SLOT:PINNED pairs, '->', the evicted slots in append order.\n";
  uint64_t state = 2026;
  auto next = [&](uint64_t bound) {
    state += 1;
    return rule::SplitMix64(state) % bound;
  };
  for (int c = 0; c < 24; ++c) {
    StreamingRule streaming;
    streaming.budget = 1 + static_cast<int64_t>(next(24));
    streaming.sinks = static_cast<int64_t>(next(5));
    streaming.recent = static_cast<int64_t>(next(6));
    streaming.block_size = c % 3 == 0 ? 1 : static_cast<int32_t>(1 + next(5));
    absl::StrAppend(&out, "case ", streaming.budget, " ", streaming.sinks, " ",
                    streaming.recent, " ", streaming.block_size, "\n");
    LiveSet live;
    uint64_t slot = 100 * static_cast<uint64_t>(c);
    for (int step = 0; step < 40; ++step) {
      const int n = step == 0 ? static_cast<int>(next(8)) : 1 + static_cast<int>(next(3));
      std::vector<uint64_t> ids;
      std::vector<uint8_t> pinned;
      std::vector<std::string> pairs;
      for (int i = 0; i < n; ++i) {
        ids.push_back(slot++);
        pinned.push_back(next(10) == 0 ? 1 : 0);
        pairs.push_back(absl::StrCat(ids.back(), ":", int{pinned.back()}));
      }
      live.Append(ids, pinned);
      const std::vector<uint64_t> evicted = live.StreamingEvictions(streaming);
      live.Remove(evicted);
      absl::StrAppend(&out, absl::StrJoin(pairs, " "), " ->",
                      evicted.empty() ? "" : " ", absl::StrJoin(evicted, " "),
                      "\n");
    }
  }
  return out;
}

// Compares tests/fixtures/`name` with `expected` (this library's answers),
// first rewriting the file when ENTROKV_UPDATE_FIXTURES=1.
void ExpectFixture(const char* name, const std::string& expected) {
  const std::string path =
      absl::StrCat(ENTROKV_SOURCE_DIR, "/tests/fixtures/", name);
  const char* update = std::getenv("ENTROKV_UPDATE_FIXTURES");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << expected;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), expected)
      << path << " differs from what the C++ live set answers";
}

TEST(FallbackFixtureTest, TheSharedFixtureIsWhatThisLibraryAnswers) {
  ExpectFixture("fallback_streaming.txt", FallbackFixture());
}

// The demote tier's record and fail-open rule on shared vectors, as
// FallbackFixture: tests/fixtures/tier_live_set.txt, replayed by
// tests/python/test_fallback_fixture.py. Each step appends, then applies
// moves drawn at random as a server would answer them (disjoint: evict among
// held entries, demote among live ones, promote among demoted ones, applied
// in that order), then records the fail-open evictions of the set (not
// applied) and the live and demoted slots.
std::string TierFixture() {
  std::string out =
      "# The client libraries' demote-tier record and fail-open rule on\n"
      "# shared vectors: generated by tests/client/live_set_test.cc\n"
      "# (TierFixture), replayed by tests/python/test_fallback_fixture.py.\n"
      "# case BUDGET SINKS RECENT; then per step the appended SLOT:PINNED\n"
      "# pairs, '| evict' ids, '| demote' ids, '| promote' ids (applied in\n"
      "# that order), '->' the fail-open evictions (not applied), '| live'\n"
      "# and '| tier' the slots after the moves, each in append order.\n";
  uint64_t state = 2407;
  auto next = [&](uint64_t bound) {
    state += 1;
    return rule::SplitMix64(state) % bound;
  };
  // A random subset of `from`, each kept with probability 1/`one_in`.
  auto some = [&](const std::vector<uint64_t>& from, uint64_t one_in) {
    std::vector<uint64_t> picked;
    for (const uint64_t id : from) {
      if (next(one_in) == 0) picked.push_back(id);
    }
    return picked;
  };
  auto minus = [](std::vector<uint64_t> from,
                  const std::vector<uint64_t>& drop) {
    std::erase_if(from, [&](uint64_t id) {
      return std::find(drop.begin(), drop.end(), id) != drop.end();
    });
    return from;
  };
  for (int c = 0; c < 12; ++c) {
    StreamingRule streaming;
    streaming.budget = 1 + static_cast<int64_t>(next(12));
    streaming.sinks = static_cast<int64_t>(next(4));
    streaming.recent = static_cast<int64_t>(next(4));
    absl::StrAppend(&out, "case ", streaming.budget, " ", streaming.sinks, " ",
                    streaming.recent, "\n");
    LiveSet live;
    uint64_t slot = 100 * static_cast<uint64_t>(c);
    for (int step = 0; step < 30; ++step) {
      const int n = step == 0 ? 6 : static_cast<int>(next(3));
      std::vector<uint64_t> ids;
      std::vector<uint8_t> pinned;
      std::vector<std::string> pairs;
      for (int i = 0; i < n; ++i) {
        ids.push_back(slot++);
        pinned.push_back(next(12) == 0 ? 1 : 0);
        pairs.push_back(absl::StrCat(ids.back(), ":", int{pinned.back()}));
      }
      live.Append(ids, pinned);
      const std::vector<uint64_t> tier_before = live.TierSlots();
      std::vector<uint64_t> held = live.Slots();
      held.insert(held.end(), tier_before.begin(), tier_before.end());
      std::sort(held.begin(), held.end());  // Slot ids grow in append order.
      const std::vector<uint64_t> evict = some(held, 8);
      const std::vector<uint64_t> demote = some(minus(live.Slots(), evict), 4);
      const std::vector<uint64_t> promote = some(minus(tier_before, evict), 3);
      live.Remove(evict);
      live.Demote(demote);
      live.Promote(promote);
      // "LABEL" and the ids, each after a space (no trailing blank).
      auto list = [](const char* label, const std::vector<uint64_t>& v) {
        return absl::StrCat(label, v.empty() ? "" : " ", absl::StrJoin(v, " "));
      };
      absl::StrAppend(&out, absl::StrJoin(pairs, " "), pairs.empty() ? "" : " ",
                      list("| evict", evict), " ", list("| demote", demote),
                      " ", list("| promote", promote), " ",
                      list("->", live.FailOpenEvictions(streaming)), " ",
                      list("| live", live.Slots()), " ",
                      list("| tier", live.TierSlots()), "\n");
    }
  }
  return out;
}

TEST(FallbackFixtureTest, TheSharedTierFixtureIsWhatThisLibraryAnswers) {
  ExpectFixture("tier_live_set.txt", TierFixture());
}

// A demote tier (live_set.h): slots 10..15 at append indices 0..5, 12
// pinned. Demoting 11 and 13 leaves 10 12 14 15 live; promoting 13 puts it
// back at index 3, before 14.
TEST_F(LiveSetTest, DemotedEntriesLeaveAndReturnToTheirAppendPlace) {
  const std::vector<uint64_t> ids = {10, 11, 12, 13, 14, 15};
  const std::vector<uint8_t> pinned = {0, 0, 1, 0, 0, 0};
  live_.Append(ids, pinned);
  EXPECT_EQ(live_.Demote(std::vector<uint64_t>{11, 13, 99}), 2);
  EXPECT_THAT(live_.Slots(), ElementsAre(10, 12, 14, 15));
  EXPECT_THAT(live_.TierSlots(), ElementsAre(11, 13));
  EXPECT_EQ(live_.size(), 4);
  EXPECT_EQ(live_.tier_size(), 2);
  EXPECT_FALSE(live_.Contains(11));
  EXPECT_TRUE(live_.Demoted(11));

  const uint64_t again = 13;
  const absl::Status refused = live_.CheckAppend({&again, 1}, {});
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "append.slot_ids: slot 13 is in the demote tier");

  EXPECT_EQ(live_.Promote(std::vector<uint64_t>{13, 10}), 1);  // 10 is live.
  EXPECT_THAT(live_.Slots(), ElementsAre(10, 12, 13, 14, 15));
  EXPECT_THAT(live_.TierSlots(), ElementsAre(11));
  // The pinned flag travels with the entry.
  live_.Demote(std::vector<uint64_t>{12});
  live_.Promote(std::vector<uint64_t>{12});
  std::vector<uint64_t> slots;
  std::vector<uint8_t> flags;
  live_.Entries(&slots, &flags);
  EXPECT_THAT(slots, ElementsAre(10, 12, 13, 14, 15));
  EXPECT_THAT(flags, ElementsAre(0, 1, 0, 0, 0));
  // Remove() drops demoted entries too.
  EXPECT_EQ(live_.Remove(std::vector<uint64_t>{11}), 1);
  EXPECT_THAT(live_.TierSlots(), IsEmpty());
}

// The fail-open decision with a tier: live 10 12(pinned) 13 14 15 and 11
// demoted, budget 3, sink 10, recent 15 (the newest index, 5): 13 and 14 are
// the rule's evictions; 11 joins them, all in append order.
TEST_F(LiveSetTest, FailOpenEvictionsAddTheTierInAppendOrder) {
  const std::vector<uint64_t> ids = {10, 11, 12, 13, 14, 15};
  const std::vector<uint8_t> pinned = {0, 0, 1, 0, 0, 0};
  live_.Append(ids, pinned);
  live_.Demote(std::vector<uint64_t>{11});
  const StreamingRule rule{.budget = 3, .sinks = 1, .recent = 1};
  EXPECT_THAT(live_.StreamingEvictions(rule), ElementsAre(13, 14));
  EXPECT_THAT(live_.FailOpenEvictions(rule), ElementsAre(11, 13, 14));
  // With nothing over the budget, the tier alone.
  EXPECT_THAT(live_.FailOpenEvictions({.budget = 10}), ElementsAre(11));
  // Without a tier, the same as the streaming rule.
  live_.Remove(std::vector<uint64_t>{11});
  EXPECT_THAT(live_.FailOpenEvictions(rule), ElementsAre(13, 14));
}

// A promoted id the set never held (a session attached with its live
// entries only) becomes the newest live entry.
TEST_F(LiveSetTest, PromotingAnUnknownIdAppendsIt) {
  AppendRange(10, 3);
  EXPECT_EQ(live_.Promote(std::vector<uint64_t>{77}), 1);
  EXPECT_THAT(live_.Slots(), ElementsAre(10, 11, 12, 77));
  EXPECT_EQ(live_.next_index(), 4);
}

}  // namespace
}  // namespace entrokv

namespace entrokv {
namespace {

// A LiveSet written the plainest way, for the randomized test below: every
// entry ever appended, by append index, with its state; the evictions
// worked out block by block from the rule's text (LiveSet walks its
// entries instead).
class ModelLiveSet {
 public:
  enum State { kGone, kLive, kDemoted };
  struct Entry {
    uint64_t slot_id;
    bool pinned;
    State state;
  };

  void Append(uint64_t id, bool pinned) {
    entries_.push_back({id, pinned, kLive});
  }
  // The append index of a held id, or -1.
  int64_t Find(uint64_t id) const {
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].slot_id == id && entries_[i].state != kGone) return i;
    }
    return -1;
  }
  std::vector<Entry>& entries() { return entries_; }

  std::vector<uint64_t> InState(State state) const {
    std::vector<uint64_t> out;
    for (const Entry& e : entries_) {
      if (e.state == state) out.push_back(e.slot_id);
    }
    return out;
  }
  std::vector<uint8_t> LivePinned() const {
    std::vector<uint8_t> out;
    for (const Entry& e : entries_) {
      if (e.state == kLive) out.push_back(e.pinned ? 1 : 0);
    }
    return out;
  }

  std::vector<uint64_t> StreamingEvictions(const StreamingRule& rule) const {
    const int64_t next = static_cast<int64_t>(entries_.size());
    const auto live_unprotected = [&](int64_t i) {
      const Entry& e = entries_[i];
      return e.state == kLive &&
             !rule::IsProtected(rule.sinks, rule.recent, i, next, e.pinned);
    };
    int64_t need = static_cast<int64_t>(InState(kLive).size()) - rule.budget;
    std::vector<uint64_t> out;
    const int64_t n = rule.block_size;
    for (int64_t first = 0; need > 0 && first + n <= next; first += n) {
      bool whole = true;
      for (int64_t i = first; i < first + n; ++i) {
        whole = whole && live_unprotected(i);
      }
      if (!whole) continue;
      for (int64_t i = first; i < first + n; ++i) {
        out.push_back(entries_[i].slot_id);
      }
      need -= n;
    }
    return out;
  }
  // The streaming evictions and every demoted id, in append order.
  std::vector<uint64_t> FailOpenEvictions(const StreamingRule& rule) const {
    const std::vector<uint64_t> live = StreamingEvictions(rule);
    const std::set<uint64_t> evicted(live.begin(), live.end());
    std::vector<uint64_t> out;
    for (const Entry& e : entries_) {
      if (e.state == kDemoted ||
          (e.state == kLive && evicted.contains(e.slot_id))) {
        out.push_back(e.slot_id);
      }
    }
    return out;
  }

 private:
  std::vector<Entry> entries_;
};

// Thousands of random appends, removals (of held and unknown ids),
// demotions and promotions (of demoted and unknown ids), with LiveSet
// checked against the model after each: its entries, its tier, and the
// local decisions by token and by block of 4, with sinks, a recent window
// and pinned entries. Enough removals to drop its removed entries many
// times over.
TEST(LiveSetRandomTest, AgreesWithAPlainModelThroughManyOperations) {
  std::mt19937_64 rng(7);
  // Uniform in [0, n); 0 when n is 0.
  const auto below = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  LiveSet live;
  ModelLiveSet model;
  uint64_t next_id = 1000;
  std::vector<uint64_t> slots, model_slots;
  std::vector<uint8_t> pinned;
  for (int op = 0; op < 6000; ++op) {
    SCOPED_TRACE(absl::StrCat("operation ", op));
    const uint64_t kind = below(10);
    if (kind < 5) {  // Append 1 to 3 new ids.
      const int count = 1 + static_cast<int>(below(3));
      std::vector<uint64_t> ids;
      std::vector<uint8_t> flags;
      for (int i = 0; i < count; ++i) {
        ids.push_back(next_id++);
        flags.push_back(below(8) == 0 ? 1 : 0);
      }
      ASSERT_OK(live.CheckAppend(ids, flags));
      live.Append(ids, flags);
      for (int i = 0; i < count; ++i) model.Append(ids[i], flags[i] != 0);
    } else if (kind < 8) {  // Remove up to 4 ids, most of them held.
      const std::vector<uint64_t> held_ids = model.InState(ModelLiveSet::kLive);
      std::vector<uint64_t> ids;
      int64_t expected = 0;
      for (int i = 0, count = 1 + static_cast<int>(below(4)); i < count; ++i) {
        const uint64_t id = held_ids.empty() || below(4) == 0
                                ? 1000 + below(next_id - 1000 + 5)
                                : held_ids[below(held_ids.size())];
        if (std::find(ids.begin(), ids.end(), id) != ids.end()) continue;
        ids.push_back(id);
        if (const int64_t at = model.Find(id); at >= 0) {
          model.entries()[at].state = ModelLiveSet::kGone;
          ++expected;
        }
      }
      ASSERT_EQ(live.Remove(ids), expected);
    } else if (kind == 8) {  // Demote a random id.
      const uint64_t id = 1000 + below(next_id - 1000);
      const int64_t at = model.Find(id);
      const bool moves =
          at >= 0 && model.entries()[at].state == ModelLiveSet::kLive;
      if (moves) model.entries()[at].state = ModelLiveSet::kDemoted;
      ASSERT_EQ(live.Demote({&id, 1}), moves ? 1 : 0);
    } else {  // Promote a demoted id, or an unknown one.
      const std::vector<uint64_t> tier = model.InState(ModelLiveSet::kDemoted);
      const bool unknown = tier.empty() || below(4) == 0;
      const uint64_t id = unknown ? next_id++ : tier[below(tier.size())];
      if (unknown) {
        model.Append(id, false);
      } else {
        model.entries()[model.Find(id)].state = ModelLiveSet::kLive;
      }
      ASSERT_EQ(live.Promote({&id, 1}), 1);
    }
    ASSERT_EQ(live.Slots(), model.InState(ModelLiveSet::kLive));
    ASSERT_EQ(live.TierSlots(), model.InState(ModelLiveSet::kDemoted));
    ASSERT_EQ(live.size(),
              static_cast<int64_t>(model.InState(ModelLiveSet::kLive).size()));
    ASSERT_EQ(
        live.tier_size(),
        static_cast<int64_t>(model.InState(ModelLiveSet::kDemoted).size()));
    live.Entries(&slots, &pinned);
    ASSERT_EQ(pinned, model.LivePinned());
    const uint64_t probe = 1000 + below(next_id - 1000);
    const int64_t at = model.Find(probe);
    ASSERT_EQ(live.Contains(probe),
              at >= 0 && model.entries()[at].state == ModelLiveSet::kLive);
    ASSERT_EQ(live.Demoted(probe),
              at >= 0 && model.entries()[at].state == ModelLiveSet::kDemoted);
    const int64_t held = live.size();
    for (const StreamingRule rule :
         {StreamingRule{.budget = std::max<int64_t>(1, held / 2)},
          StreamingRule{.budget = std::max<int64_t>(1, held - 3),
          .sinks = 4,
          .recent = 8},
          StreamingRule{.budget = std::max<int64_t>(1, held / 3),
          .sinks = 2,
          .recent = 5,
          .block_size = 4}}) {
      ASSERT_EQ(live.StreamingEvictions(rule), model.StreamingEvictions(rule))
          << "budget " << rule.budget << " block " << rule.block_size;
      ASSERT_EQ(live.FailOpenEvictions(rule), model.FailOpenEvictions(rule));
    }
  }
  // The run removed far more entries than it holds at the end.
  EXPECT_LT(live.size() + live.tier_size(),
            static_cast<int64_t>(next_id - 1000) / 2);
}

}  // namespace
}  // namespace entrokv
