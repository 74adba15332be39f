// The engine with entrokv core deciding in process: the evictions of rankings
// whose kept set is known in closed form reproduce the independent reference
// restricted to that set, and every policy holds its budget.

#include "tinyllama/decider.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/eval/reference.h"
#include "tests/testing/status_matchers.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/model.h"
#include "tinyllama/tokenizer.h"

namespace entrokv::tinyllama {
namespace {

using ::entrokv::tinyllama::testing::DataDirOrEmpty;
using ::entrokv::tinyllama::testing::LoadTestData;
using ::entrokv::tinyllama::testing::TestData;
using ::entrokv::tinyllama::testing::ReferenceNll;
using ::entrokv::tinyllama::testing::RunReference;

class InProcessDeciderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = DataDirOrEmpty();
    ENTROKV_SKIP_WITHOUT_DATA(data_);
    ASSERT_OK_AND_ASSIGN(TestData loaded, LoadTestData(data_, 2, 512));
    model_ = std::move(loaded.model);
    tokens_ = std::move(loaded.stories);
    ASSERT_OK_AND_ASSIGN(decider_, CreateInProcessDecider());
  }

  // Evaluates story `i` with a fresh session of `config`.
  absl::StatusOr<SequenceResult> Run(const SessionConfig& config, int i,
                                     int lag = 0) {
    auto session = decider_->Open(config);
    if (!session.ok()) return session.status();
    EvaluateOptions options;
    options.lag = lag;
    return EvaluateSequence(*model_, tokens_[i], session->get(), options);
  }

  SessionConfig Config(Ranking ranking, BudgetControl control,
                       int64_t budget) const {
    SessionConfig config = EngineSessionConfig(model_->config(), budget);
    config.ranking = ranking;
    config.budget_control = control;
    return config;
  }

  std::string data_;
  std::unique_ptr<Model> model_;
  std::vector<std::vector<int>> tokens_;
  std::unique_ptr<Decider> decider_;
};

TEST_F(InProcessDeciderTest, WindowRankingKeepsTheLastBudgetEntries) {
  ENTROKV_SKIP_WITHOUT_PYTHON();
  // After step t entrokv keeps positions t-15..t: token s attends s-j <= 16.
  ASSERT_OK_AND_ASSIGN(auto reference,
                       ReferenceNll(data_, "--stories 2 --window 16"));
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(
        SequenceResult r,
        Run(Config(Ranking::kWindow, BudgetControl::kFixed, 16), i));
    EXPECT_NEAR(r.nll_sum, reference[i].nll_sum, 1e-4 * reference[i].nll_sum);
    EXPECT_EQ(r.peak_live, 17);
  }
}

TEST_F(InProcessDeciderTest, MeasuredRecallMatchesTheReference) {
  ENTROKV_SKIP_WITHOUT_PYTHON();
  // The window keeps positions s-15..s after step s; the reference sums,
  // over those steps, the share of the full causal softmax of its own q and
  // k (float64) that falls there, and of the top 16 positions (the oracle).
  ASSERT_OK_AND_ASSIGN(
      std::vector<std::string> lines,
      RunReference(data_, "nll --stories 2 --window 16 --recall"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Decider> measuring,
                       CreateInProcessDecider(BackendKind::kCpu,
                                              /*measure_recall=*/true));
  int checked = 0;
  for (const std::string& line : lines) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f[0] != "recall") continue;
    ASSERT_EQ(f.size(), 5u) << line;
    int i = 0, steps = 0;
    double sum = 0.0, oracle = 0.0;
    ASSERT_TRUE(absl::SimpleAtoi(f[1], &i) && absl::SimpleAtoi(f[2], &steps) &&
                absl::SimpleAtod(f[3], &sum) && absl::SimpleAtod(f[4], &oracle))
        << line;
    ASSERT_OK_AND_ASSIGN(auto session,
                         measuring->Open(Config(Ranking::kWindow,
                                                BudgetControl::kFixed, 16)));
    ASSERT_OK_AND_ASSIGN(
        SequenceResult r,
        EvaluateSequence(*model_, tokens_[i], session.get(), {}));
    EXPECT_EQ(r.recall_steps, steps);
    EXPECT_NEAR(r.recall_sum, sum, 1e-5 * steps);
    EXPECT_NEAR(r.oracle_recall_sum, oracle, 1e-5 * steps);
    EXPECT_LT(r.recall_sum, r.oracle_recall_sum);  // Something was lost.
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  // Without measuring, no step reports recall.
  ASSERT_OK_AND_ASSIGN(
      SequenceResult plain,
      Run(Config(Ranking::kWindow, BudgetControl::kFixed, 16), 0));
  EXPECT_EQ(plain.recall_steps, 0);
}

TEST_F(InProcessDeciderTest, StreamingRankingKeepsSinkAndRecent) {
  ENTROKV_SKIP_WITHOUT_PYTHON();
  // One sink + 15 recent after each step: s - j <= 15 or j == 0; one step
  // late: s - j <= 16 or j == 0.
  ASSERT_OK_AND_ASSIGN(auto now,
                       ReferenceNll(data_, "--stories 2 --window 15 --sink"));
  ASSERT_OK_AND_ASSIGN(auto late,
                       ReferenceNll(data_, "--stories 2 --window 16 --sink"));
  SessionConfig config = Config(Ranking::kStreaming, BudgetControl::kFixed, 16);
  config.streaming_sinks = 1;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(SequenceResult r, Run(config, i));
    EXPECT_NEAR(r.nll_sum, now[i].nll_sum, 1e-4 * now[i].nll_sum);
    ASSERT_OK_AND_ASSIGN(SequenceResult r1, Run(config, i, /*lag=*/1));
    EXPECT_NEAR(r1.nll_sum, late[i].nll_sum, 1e-4 * late[i].nll_sum);
  }
}

TEST_F(InProcessDeciderTest, EveryPolicyHoldsItsBudget) {
  constexpr int64_t kBudget = 24;
  for (const auto& [ranking, control] : AllPolicies()) {
    const SessionConfig config = Config(ranking, control, kBudget);
    SCOPED_TRACE(PolicyName(config));
    ASSERT_OK_AND_ASSIGN(SequenceResult r, Run(config, 0));
    // Fixed and threshold: B after each step, + the next token. Entropy:
    // B_max = ceil(B·(1 + γ)) with the default γ = 0.5.
    const int64_t ceiling =
        control != BudgetControl::kEntropy
            ? kBudget + 1
            : static_cast<int64_t>(std::ceil(kBudget * 1.5)) + 1;
    EXPECT_LE(r.peak_live, ceiling);
    EXPECT_GT(r.evicted, 0);
    EXPECT_TRUE(std::isfinite(r.nll_sum));
  }
}

TEST_F(InProcessDeciderTest, SameInputSameEvictions) {
  const SessionConfig config =
      Config(Ranking::kAffinity, BudgetControl::kEntropy, 32);
  ASSERT_OK_AND_ASSIGN(SequenceResult a, Run(config, 1));
  ASSERT_OK_AND_ASSIGN(SequenceResult b, Run(config, 1));
  EXPECT_EQ(a.nll_sum, b.nll_sum);
  EXPECT_EQ(a.live_sum, b.live_sum);
}

TEST_F(InProcessDeciderTest, BadConfigIsInvalidArgument) {
  SessionConfig config = Config(Ranking::kH2o, BudgetControl::kFixed, 16);
  config.shape.q_heads = 6;  // Not a multiple of 4 kv heads.
  EXPECT_STATUS_CODE(decider_->Open(config),
                     absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace entrokv::tinyllama
