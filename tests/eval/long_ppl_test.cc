// Long-range perplexity (LongPPL): the key-token rule worked by hand on a
// small per-token NLL vector, and on real stories the rule's consequences
// (no key token while the short window still holds the whole context) and
// the full cache's LongPPL against the mean over the key tokens summed
// here.

#include "tinyllama/long_ppl.h"

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "tests/eval/reference.h"
#include "tests/testing/status_matchers.h"
#include "tinyllama/decider.h"
#include "tinyllama/evaluator.h"

namespace entrokv::tinyllama {
namespace {

using ::entrokv::tinyllama::testing::DataDirOrEmpty;
using ::entrokv::tinyllama::testing::LoadTestData;
using ::entrokv::tinyllama::testing::TestData;

// Seven scored tokens, with values exact in binary so that the boundary
// cases fall exactly on the thresholds:
//   t  NLL full  NLL short  LSD    log p full  key (alpha 2, beta -2)
//   0  0.5       0.5        0      -0.5        no: LSD 0
//   1  1.0       3.5        2.5    -1.0        yes
//   2  3.0       6.0        3.0    -3.0        no: log p <= beta
//   3  0.25      2.25       2.0    -0.25       no: LSD not > alpha
//   4  1.5       4.0        2.5    -1.5        yes
//   5  2.0       5.0        3.0    -2.0        no: log p not > beta
//   6  0.125     2.5        2.375  -0.125      yes
class KeyTokensByHandTest : public ::testing::Test {
 protected:
  const std::vector<double> full_ = {0.5, 1.0, 3.0, 0.25, 1.5, 2.0, 0.125};
  const std::vector<double> short_ = {0.5, 3.5, 6.0, 2.25, 4.0, 5.0, 2.5};
};

TEST_F(KeyTokensByHandTest, SelectsTokensAboveBothThresholds) {
  EXPECT_EQ(SelectKeyTokens(full_, short_, KeyTokenParams{}),
            (std::vector<uint8_t>{0, 1, 0, 0, 1, 0, 1}));
}

TEST_F(KeyTokensByHandTest, HigherAlphaDropsTheSmallerGaps) {
  // alpha 2.4: tokens 1 and 4 (LSD 2.5) stay, token 6 (2.375) goes.
  EXPECT_EQ(SelectKeyTokens(full_, short_, KeyTokenParams{2.4, -2.0}),
            (std::vector<uint8_t>{0, 1, 0, 0, 1, 0, 0}));
  // beta -3.5 admits token 2 (log p -3) and token 5 (-2).
  EXPECT_EQ(SelectKeyTokens(full_, short_, KeyTokenParams{2.0, -3.5}),
            (std::vector<uint8_t>{0, 1, 1, 0, 1, 1, 1}));
}

TEST_F(KeyTokensByHandTest, LongPerplexityIsTheMeanOverKeyTokens) {
  const std::vector<uint8_t> key = {0, 1, 0, 0, 1, 0, 1};
  // Full cache: (1.0 + 1.5 + 0.125) / 3 = 0.875 nats; e^0.875 = 2.398875...
  const KeyNll full = SumOverKeyTokens(full_, key);
  EXPECT_DOUBLE_EQ(full.nll, 2.625);
  EXPECT_EQ(full.tokens, 3);
  EXPECT_NEAR(LongPerplexity(full.nll, full.tokens), 2.398875293967098, 1e-12);
  // Short window: (3.5 + 4.0 + 2.5) / 3 = 10/3 nats; e^(10/3) = 28.0316...
  const KeyNll brief = SumOverKeyTokens(short_, key);
  EXPECT_NEAR(LongPerplexity(brief.nll, brief.tokens), 28.03162489452614, 1e-9);
}

TEST(LongPerplexityTest, NoKeyTokenGivesNaN) {
  EXPECT_TRUE(std::isnan(LongPerplexity(0.0, 0)));
  EXPECT_TRUE(SelectKeyTokens({}, {}, KeyTokenParams{}).empty());
  const KeyNll none = SumOverKeyTokens(std::vector<double>{1.0, 2.0},
                                       std::vector<uint8_t>{0, 0});
  EXPECT_EQ(none.tokens, 0);
  EXPECT_EQ(none.nll, 0.0);
}

// On real stories: the full cache against window+fixed at 16, as
// entrokv-eval chooses its key tokens.
class KeyTokensOnStoriesTest : public ::testing::Test {
 protected:
  static constexpr int64_t kWindow = 16;

  void SetUp() override {
    const std::string dir = DataDirOrEmpty();
    ENTROKV_SKIP_WITHOUT_DATA(dir);
    ASSERT_OK_AND_ASSIGN(TestData loaded, LoadTestData(dir, 4, 512));
    model_ = std::move(loaded.model);
    stories_ = std::move(loaded.stories);
    ASSERT_OK_AND_ASSIGN(decider_, CreateInProcessDecider());
  }

  // Per-token NLL of story `i`: the full cache, or window+fixed at kWindow.
  std::vector<double> Nll(int i, bool window) {
    EvaluateOptions options;
    options.keep_per_token_nll = true;
    std::unique_ptr<DeciderSession> session;
    if (window) {
      SessionConfig config = EngineSessionConfig(model_->config(), kWindow);
      config.ranking = Ranking::kWindow;
      config.budget_control = BudgetControl::kFixed;
      auto opened = decider_->Open(config);
      EXPECT_TRUE(opened.ok()) << opened.status();
      if (!opened.ok()) return {};
      session = *std::move(opened);
    }
    auto r = EvaluateSequence(*model_, stories_[i], session.get(), options);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->nll : std::vector<double>{};
  }

  std::unique_ptr<Model> model_;
  std::vector<std::vector<int>> stories_;
  std::unique_ptr<Decider> decider_;
};

TEST_F(KeyTokensOnStoriesTest, KeyTokensNeedContextBeyondTheWindow) {
  int64_t keys = 0, scored = 0;
  for (int i = 0; i < static_cast<int>(stories_.size()); ++i) {
    const std::vector<double> full = Nll(i, false);
    const std::vector<double> window = Nll(i, true);
    ASSERT_EQ(full.size(), window.size());
    const std::vector<uint8_t> key =
        SelectKeyTokens(full, window, KeyTokenParams{});
    // Token t attends min(t + 1, kWindow + 1) entries under the window, all
    // of them while t <= kWindow: the same context as the full cache, the
    // same NLL, no key token.
    for (size_t t = 0; t <= static_cast<size_t>(kWindow) && t < full.size();
         ++t) {
      EXPECT_DOUBLE_EQ(window[t], full[t]) << "story " << i << " t " << t;
      EXPECT_EQ(key[t], 0) << "story " << i << " t " << t;
    }
    // The full cache's LongPPL is exp of the mean of its NLL over the key
    // tokens, gathered and averaged here.
    std::vector<double> gathered;
    for (size_t t = 0; t < key.size(); ++t) {
      if (key[t]) gathered.push_back(full[t]);
    }
    const KeyNll sum = SumOverKeyTokens(full, key);
    ASSERT_EQ(sum.tokens, static_cast<int64_t>(gathered.size()));
    if (!gathered.empty()) {
      const double mean =
          std::accumulate(gathered.begin(), gathered.end(), 0.0) /
          static_cast<double>(gathered.size());
      EXPECT_NEAR(LongPerplexity(sum.nll, sum.tokens), std::exp(mean),
                  1e-12 * std::exp(mean));
      // Each key token is predicted with probability above e^-2.
      EXPECT_LT(mean, 2.0);
    }
    keys += sum.tokens;
    scored += static_cast<int64_t>(full.size());
  }
  // Some tokens need the longer context, and most do not.
  EXPECT_GT(keys, 0);
  EXPECT_LT(keys, scored / 4);
}

}  // namespace
}  // namespace entrokv::tinyllama
