// The engine side of a demote tier (docs/step-semantics.md section 12): the
// evaluator moves the slots a decider demotes and promotes between its
// cache's device and host stores. A demoted entry takes no part in attention
// until it is promoted, and it comes back bit for bit. Checked against the
// independent numpy reference and against the full cache, with deciders
// written here; then with entrokv core's own tier decisions.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
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
using ::entrokv::tinyllama::testing::ReferenceNll;
using ::entrokv::tinyllama::testing::TestData;

// K and V × 5 layers × 4 kv heads × 8 dims × 4-byte floats: what moving one
// stories260K entry copies.
constexpr int64_t kEntryBytes = 2 * 5 * 4 * 8 * 4;

// On even steps t, demotes every live entry but token t's; on odd steps,
// promotes every demoted entry. So with lag 0 an odd token s attends s − 1
// and s, an even one every entry (reference_llama.py --alternate).
class AlternatingTierSession : public DeciderSession {
 public:
  absl::Status Step(const DecisionRequest& request,
                    Decision* decision) override {
    const uint64_t t = request.step - 1;  // The evaluator numbers from 1.
    live_.push_back(request.slot);
    if (t % 2 == 0) {
      decision->demoted.assign(live_.begin(), live_.end() - 1);
      demoted_ = decision->demoted;
      live_.erase(live_.begin(), live_.end() - 1);
    } else {
      decision->promoted = demoted_;
      live_.insert(live_.begin(), demoted_.begin(), demoted_.end());
      demoted_.clear();
    }
    decision->live = static_cast<int64_t>(live_.size());
    return absl::OkStatus();
  }
  absl::Status Close() override { return absl::OkStatus(); }

 private:
  std::vector<uint64_t> live_;     // Append order.
  std::vector<uint64_t> demoted_;  // Append order.
};

// Demotes every live entry but the newest at every step and promotes them
// all back in the same answer, newest first. entrokv never names an entry in
// both lists; this decider does, to send each entry through the host tier
// and back before the next token attends it.
class RoundTripSession : public DeciderSession {
 public:
  absl::Status Step(const DecisionRequest& request,
                    Decision* decision) override {
    decision->demoted = live_;
    decision->promoted.assign(live_.rbegin(), live_.rend());
    live_.push_back(request.slot);
    decision->live = static_cast<int64_t>(live_.size());
    return absl::OkStatus();
  }
  absl::Status Close() override { return absl::OkStatus(); }

 private:
  std::vector<uint64_t> live_;  // Append order.
};

class HostTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = DataDirOrEmpty();
    ENTROKV_SKIP_WITHOUT_DATA(data_);
    ASSERT_OK_AND_ASSIGN(TestData loaded, LoadTestData(data_, 3, 512));
    model_ = std::move(loaded.model);
    stories_ = std::move(loaded.stories);
  }

  absl::StatusOr<SequenceResult> Alternate(int story, int host_capacity,
                                           bool per_token = false) {
    AlternatingTierSession session;
    EvaluateOptions options;
    options.host_capacity = host_capacity;
    options.keep_per_token_nll = per_token;
    return EvaluateSequence(*model_, stories_[story], &session, options);
  }

  std::string data_;
  std::unique_ptr<Model> model_;
  std::vector<std::vector<int>> stories_;
};

TEST_F(HostTierTest, DemotedEntriesAreNotAttendedUntilPromoted) {
  ENTROKV_SKIP_WITHOUT_PYTHON();
  ASSERT_OK_AND_ASSIGN(auto reference,
                       ReferenceNll(data_, "--stories 2 --alternate"));
  ASSERT_OK_AND_ASSIGN(auto full, ReferenceNll(data_, "--stories 2"));
  for (int i = 0; i < 2; ++i) {
    const int64_t n = static_cast<int64_t>(stories_[i].size()) - 1;
    ASSERT_EQ(reference[i].tokens, n + 1);
    ASSERT_OK_AND_ASSIGN(SequenceResult r, Alternate(i, 512));
    EXPECT_NEAR(r.nll_sum, reference[i].nll_sum, 1e-4 * reference[i].nll_sum)
        << "story " << i;
    // Leaving the demoted entries out really changes the result.
    EXPECT_GT(std::abs(reference[i].nll_sum - full[i].nll_sum),
              1e-2 * full[i].nll_sum);
    // Device entries only: token 0 attends 1, an odd token 2, an even
    // token s >= 2 all s + 1. Step t demotes t entries (t even) or promotes
    // the t - 1 demoted at step t - 1 (t odd).
    int64_t live_sum = 0, demoted = 0, promoted = 0;
    for (int64_t s = 0; s < n; ++s) {
      live_sum += s == 0 ? 1 : s % 2 == 1 ? 2 : s + 1;
      if (s % 2 == 0)
        demoted += s;
      else
        promoted += s - 1;
    }
    EXPECT_EQ(r.live_sum, live_sum) << "story " << i;
    // The most at once is n: the last even token attends n entries (n odd),
    // or the last odd step promotes n - 1 beside the newest (n even).
    EXPECT_EQ(r.peak_live, n);
    EXPECT_EQ(r.demoted, demoted);
    EXPECT_EQ(r.promoted, promoted);
    EXPECT_EQ(r.evicted, 0);
    EXPECT_EQ(r.bytes_moved, (demoted + promoted) * kEntryBytes);
  }
}

TEST_F(HostTierTest, PromotedEntriesComeBackBitForBit) {
  // Every step sends every entry but the newest to the host and back, in
  // reverse order, so that each lands in another device row: every token
  // still attends every entry, and its prediction is the full cache's to the
  // last bit, which needs every key and value restored exactly and attended
  // in position order.
  for (int i = 0; i < 2; ++i) {
    const int64_t n = static_cast<int64_t>(stories_[i].size()) - 1;
    EvaluateOptions options;
    options.keep_per_token_nll = true;
    ASSERT_OK_AND_ASSIGN(
        SequenceResult full,
        EvaluateSequence(*model_, stories_[i], nullptr, options));
    RoundTripSession session;
    options.host_capacity = 512;
    ASSERT_OK_AND_ASSIGN(
        SequenceResult r,
        EvaluateSequence(*model_, stories_[i], &session, options));
    ASSERT_EQ(r.nll.size(), full.nll.size());
    for (size_t s = 0; s < r.nll.size(); ++s) {
      ASSERT_EQ(r.nll[s], full.nll[s]) << "story " << i << " token " << s;
    }
    EXPECT_EQ(r.live_sum, full.live_sum);
    // Step t moves the t older entries each way.
    EXPECT_EQ(r.demoted, n * (n - 1) / 2);
    EXPECT_EQ(r.promoted, n * (n - 1) / 2);
    EXPECT_EQ(r.bytes_moved, n * (n - 1) * kEntryBytes);
    EXPECT_EQ(r.peak_host, n - 1);
  }
}

TEST_F(HostTierTest, AHostTierTooSmallIsAnError) {
  // Step 2 demotes two entries into one host row.
  absl::StatusOr<SequenceResult> r = Alternate(0, 1);
  EXPECT_STATUS_CODE(r, absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("position 2"), std::string::npos)
      << r.status();
  // None at all: the first demotion fails.
  EXPECT_STATUS_CODE(Alternate(0, 0), absl::StatusCode::kResourceExhausted);
}

TEST_F(HostTierTest, CoreTierKeepsTheDeviceAtTheBudgetAndTheHostAtDPlusSwaps) {
  constexpr int64_t kBudget = 8;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Decider> decider,
                       CreateInProcessDecider());
  for (Ranking ranking : {Ranking::kTova, Ranking::kRkv, Ranking::kAffinity}) {
    SessionConfig config = EngineSessionConfig(model_->config(), kBudget);
    config.ranking = ranking;
    config.budget_control = BudgetControl::kFixed;
    config.tier.capacity = kBudget;  // D = B.
    int64_t promoted = 0, peak_host = 0;
    for (int i = 0; i < static_cast<int>(stories_.size()); ++i) {
      const int64_t n = static_cast<int64_t>(stories_[i].size()) - 1;
      ASSERT_GT(n, 3 * kBudget);
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeciderSession> session,
                           decider->Open(config));
      EvaluateOptions options;
      // D + P host rows: a step demotes its swaps' entries before its
      // promotions free their rows.
      options.host_capacity = kBudget + config.tier.max_promotions;
      ASSERT_OK_AND_ASSIGN(
          SequenceResult r,
          EvaluateSequence(*model_, stories_[i], session.get(), options));
      // The device holds what a fixed budget evicting only holds: token t
      // attends min(t + 1, B + 1) entries.
      int64_t live_sum = 0;
      for (int64_t t = 0; t < n; ++t) live_sum += std::min(t + 1, kBudget + 1);
      EXPECT_EQ(r.live_sum, live_sum) << RankingName(ranking) << " " << i;
      EXPECT_EQ(r.peak_live, kBudget + 1);
      // Of the n entries appended, B are live at the end and D in the tier
      // (it fills up on a story this long and stays full: a swap keeps its
      // size), so n - B - D were evicted, and at least D more demoted than
      // promoted.
      EXPECT_EQ(r.evicted, n - kBudget - kBudget) << RankingName(ranking);
      EXPECT_GE(r.demoted - r.promoted, kBudget) << RankingName(ranking);
      EXPECT_EQ(r.bytes_moved, (r.demoted + r.promoted) * kEntryBytes);
      promoted += r.promoted;
      peak_host = std::max(peak_host, r.peak_host);
    }
    EXPECT_GT(promoted, 0) << RankingName(ranking) << " never promoted";
    // Between a step's demotions and its promotions the host does hold
    // more than D.
    EXPECT_GT(peak_host, kBudget) << RankingName(ranking);
  }
}

TEST_F(HostTierTest, CoreTierPipelinedAppliesEachAnswerOneTokenLater) {
  // Lag 1: token t attends what step t - 2's answer left (B entries) and
  // tokens t - 1 and t, as when evicting only.
  constexpr int64_t kBudget = 8;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Decider> decider,
                       CreateInProcessDecider());
  SessionConfig config = EngineSessionConfig(model_->config(), kBudget);
  config.ranking = Ranking::kTova;
  config.budget_control = BudgetControl::kFixed;
  config.tier.capacity = kBudget;
  for (int i = 0; i < static_cast<int>(stories_.size()); ++i) {
    const int64_t n = static_cast<int64_t>(stories_[i].size()) - 1;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeciderSession> session,
                         decider->Open(config));
    EvaluateOptions options;
    options.lag = 1;
    options.host_capacity = kBudget + config.tier.max_promotions;
    ASSERT_OK_AND_ASSIGN(
        SequenceResult r,
        EvaluateSequence(*model_, stories_[i], session.get(), options));
    int64_t live_sum = 0;
    for (int64_t t = 0; t < n; ++t) live_sum += std::min(t + 1, kBudget + 2);
    EXPECT_EQ(r.live_sum, live_sum) << "story " << i;
    EXPECT_EQ(r.peak_live, kBudget + 2);
    EXPECT_GT(r.promoted, 0);
  }
}

}  // namespace
}  // namespace entrokv::tinyllama
