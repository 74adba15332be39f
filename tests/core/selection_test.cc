// SelectEvictions' token ranking (docs/step-semantics.md section 8: the
// weakest keep scores go first, ties to the older append index, protected
// entries never) against a brute-force sort of every candidate written here.
// Needs up to 64 take a one-pass heap and larger ones a partition of every
// candidate, so both sides of that line are checked.

#include "step_common.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace entrokv::internal {
namespace {

struct Tokens {
  std::vector<double> keep;
  std::vector<int64_t> index;
  std::vector<uint8_t> protect;
};

// `n` tokens whose scores take few distinct values (so that many tie), with
// distinct append indices in shuffled positions and about one in five
// protected.
Tokens RandomTokens(int32_t n, std::mt19937_64& rng) {
  Tokens t;
  std::vector<int64_t> order(n);
  for (int32_t i = 0; i < n; ++i) order[i] = 1000 + 3 * i;
  std::shuffle(order.begin(), order.end(), rng);
  for (int32_t p = 0; p < n; ++p) {
    t.keep.push_back(0.25 * double(rng() % 9) - 1.0);
    t.index.push_back(order[p]);
    t.protect.push_back(rng() % 5 == 0 ? 1 : 0);
  }
  return t;
}

// The positions section 8 evicts: every unprotected token sorted by (keep,
// append index), the first `need` of them, ascending by position.
std::vector<int32_t> BruteForce(const Tokens& t, int64_t need) {
  std::vector<std::tuple<double, int64_t, int32_t>> all;
  for (int32_t p = 0; p < static_cast<int32_t>(t.keep.size()); ++p) {
    if (!t.protect[p]) all.emplace_back(t.keep[p], t.index[p], p);
  }
  std::sort(all.begin(), all.end());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < need && i < static_cast<int64_t>(all.size()); ++i) {
    out.push_back(std::get<2>(all[i]));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int32_t> Select(const Tokens& t, int64_t need,
                            SelectionScratch* scratch) {
  std::vector<int32_t> evict = {-7};  // Appended to, never cleared.
  SelectEvictions({.keep = t.keep,
                   .index = t.index,
                   .protect = t.protect,
                   .next_index = 1000 + 3 * int64_t(t.keep.size()),
                   .need = need},
                  scratch, &evict);
  EXPECT_EQ(evict.front(), -7);
  evict.erase(evict.begin());
  std::sort(evict.begin(), evict.end());
  return evict;
}

TEST(SelectionTest, TheWeakestUnprotectedTokensOnBothSidesOfTheHeapsLimit) {
  std::mt19937_64 rng(20261206);
  SelectionScratch scratch;  // Reused, as a session reuses it.
  for (int32_t n : {1, 2, 7, 64, 65, 300}) {
    for (int64_t need : {1, 2, 3, 16, 63, 64, 65, 66, 200, 400}) {
      for (int trial = 0; trial < 20; ++trial) {
        const Tokens t = RandomTokens(n, rng);
        ASSERT_EQ(Select(t, need, &scratch), BruteForce(t, need))
            << "n=" << n << " need=" << need << " trial=" << trial;
      }
    }
  }
}

TEST(SelectionTest, TiesGoToTheOlderAppendIndexWhateverThePosition) {
  // Equal scores everywhere: the `need` smallest append indices go, here
  // placed at the end of the positions, in reverse.
  Tokens t;
  for (int32_t p = 0; p < 100; ++p) {
    t.keep.push_back(0.5);
    t.index.push_back(1000 - p);
    t.protect.push_back(0);
  }
  SelectionScratch scratch;
  for (int64_t need : {1, 5, 64, 65, 80}) {
    std::vector<int32_t> expected;
    for (int32_t p = 100 - static_cast<int32_t>(need); p < 100; ++p) {
      expected.push_back(p);
    }
    EXPECT_EQ(Select(t, need, &scratch), expected) << "need=" << need;
  }
}

}  // namespace
}  // namespace entrokv::internal
