// In process and over gRPC (a real server started in this process, on port 0,
// reached through the client library) the engine gets the same evictions, so
// the same perplexity and memory, for every ranking × budget controller; and
// with a demote tier, the same demotions and promotions.

#include "tinyllama/grpc_decider.h"

#include <cstdint>
#include <memory>
#include <ostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/eval/reference.h"
#include "tests/testing/status_matchers.h"
#include "tinyllama/decider.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/model.h"
#include "tinyllama/tokenizer.h"

namespace entrokv::tinyllama {
namespace {

using ::entrokv::tinyllama::testing::DataDirOrEmpty;
using ::entrokv::tinyllama::testing::LoadTestData;
using ::entrokv::tinyllama::testing::ScoringCase;
using ::entrokv::tinyllama::testing::TestData;

// One step's answer, as the engine applies it.
struct StepMoves {
  std::vector<uint64_t> evicted, demoted, promoted;
  int64_t live = 0;
  int64_t budget = 0;
  bool deferred = false;

  bool operator==(const StepMoves&) const = default;
  friend std::ostream& operator<<(std::ostream& os, const StepMoves& m) {
    return os << "evicted {" << absl::StrJoin(m.evicted, ",") << "} demoted {"
              << absl::StrJoin(m.demoted, ",") << "} promoted {"
              << absl::StrJoin(m.promoted, ",") << "} live " << m.live
              << " budget " << m.budget << (m.deferred ? " deferred" : "");
  }
};

// Passes every step on to `inner` and records its answer.
class RecordingSession : public DeciderSession {
 public:
  RecordingSession(DeciderSession* inner, std::vector<StepMoves>* moves)
      : inner_(inner), moves_(moves) {}

  absl::Status Step(const DecisionRequest& request,
                    Decision* decision) override {
    absl::Status status = inner_->Step(request, decision);
    if (status.ok()) {
      moves_->push_back(StepMoves{decision->evicted, decision->demoted,
                                  decision->promoted, decision->live,
                                  decision->budget, decision->deferred});
    }
    return status;
  }
  absl::Status Close() override { return inner_->Close(); }

 private:
  DeciderSession* inner_;
  std::vector<StepMoves>* moves_;
};

class GrpcDeciderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = DataDirOrEmpty();
    ENTROKV_SKIP_WITHOUT_DATA(data_);
    // 160 tokens each keep the suite quick; budgets below force evictions.
    ASSERT_OK_AND_ASSIGN(TestData loaded, LoadTestData(data_, 2, 160));
    model_ = std::move(loaded.model);
    tokens_ = std::move(loaded.stories);
    server::ServerOptions options;
    options.listen = {"127.0.0.1:0"};
    options.use_gpu = false;
    ASSERT_OK_AND_ASSIGN(server_, server::Server::Start(options));
    ASSERT_OK_AND_ASSIGN(grpc_, CreateGrpcDecider(server_->targets()[0]));
    ASSERT_OK_AND_ASSIGN(local_, CreateInProcessDecider());
  }

  void TearDown() override {
    grpc_.reset();
    if (server_ != nullptr) server_->Shutdown(absl::ZeroDuration());
  }

  absl::StatusOr<SequenceResult> Run(Decider* decider,
                                     const SessionConfig& config, int story,
                                     int lag) {
    auto session = decider->Open(config);
    if (!session.ok()) return session.status();
    EvaluateOptions options;
    options.lag = lag;
    options.record_evictions = true;
    auto result =
        EvaluateSequence(*model_, tokens_[story], session->get(), options);
    absl::Status closed = (*session)->Close();
    if (!result.ok()) return result.status();
    if (!closed.ok()) return closed;
    return result;
  }

  // Runs `config` (with a demote tier) on `story`, keeping the per-token
  // NLL and every step's answer in `moves`.
  absl::StatusOr<SequenceResult> RunTier(Decider* decider,
                                         const SessionConfig& config, int story,
                                         int lag,
                                         std::vector<StepMoves>* moves) {
    auto session = decider->Open(config);
    if (!session.ok()) return session.status();
    RecordingSession recording(session->get(), moves);
    EvaluateOptions options;
    options.lag = lag;
    options.keep_per_token_nll = true;
    options.host_capacity =
        static_cast<int>(config.tier.capacity + config.tier.max_promotions);
    auto result =
        EvaluateSequence(*model_, tokens_[story], &recording, options);
    absl::Status closed = (*session)->Close();
    if (!result.ok()) return result.status();
    if (!closed.ok()) return closed;
    return result;
  }

  std::string data_;
  std::unique_ptr<Model> model_;
  std::vector<std::vector<int>> tokens_;
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<Decider> grpc_;
  std::unique_ptr<Decider> local_;
};

TEST_F(GrpcDeciderTest, SameResultsAsInProcessForEveryPolicy) {
  for (const auto& [ranking, control] : AllPolicies()) {
    SessionConfig config = EngineSessionConfig(model_->config(), 24);
    config.ranking = ranking;
    config.budget_control = control;
    SCOPED_TRACE(PolicyName(config));
    for (int story = 0; story < 2; ++story) {
      for (int lag : {0, 1}) {
        ASSERT_OK_AND_ASSIGN(SequenceResult local,
                             Run(local_.get(), config, story, lag));
        ASSERT_OK_AND_ASSIGN(SequenceResult remote,
                             Run(grpc_.get(), config, story, lag));
        EXPECT_GT(local.evicted, 0);
        // Same evictions: the NLL is identical to the bit.
        EXPECT_EQ(remote.nll_sum, local.nll_sum) << "story " << story;
        EXPECT_EQ(remote.live_sum, local.live_sum);
        EXPECT_EQ(remote.peak_live, local.peak_live);
        EXPECT_EQ(remote.evicted, local.evicted);
        EXPECT_EQ(remote.evicted_at, local.evicted_at);
      }
    }
  }
}

TEST_F(GrpcDeciderTest, SameEvictionsAsInProcessForCheaperScoring) {
  // In process the decider sketches, group-sums, selects layers and skips
  // the queries of non-decision steps itself; over gRPC the client library
  // does the sketching and the summing. Same story, same evictions.
  const std::vector<ScoringCase> cases = {
      {"entropy", 4, QueryForm::kGroupSum, {}, 1, 1, false},
      {"affinity", 2, QueryForm::kPerHead, {}, 1, 1, false},
      {"tova", 4, QueryForm::kPerHead, {0, 2, 4}, 4, 1, false},
      {"h2o", 2, QueryForm::kPerHead, {}, 16, 1, false},
      {"entropy", 4, QueryForm::kGroupSum, {1, 3}, 4, 4, true},
      {"affinity", 0, QueryForm::kPerHead, {}, 1, 4, false},
  };
  for (const ScoringCase& c : cases) {
    SessionConfig config = EngineSessionConfig(model_->config(), 24);
    ASSERT_OK(ApplyPolicyName(c.policy, &config));
    c.ApplyTo(&config);
    SCOPED_TRACE(c.Describe(config));
    for (int lag : {0, 1}) {
      ASSERT_OK_AND_ASSIGN(SequenceResult local,
                           Run(local_.get(), config, 0, lag));
      ASSERT_OK_AND_ASSIGN(SequenceResult remote,
                           Run(grpc_.get(), config, 0, lag));
      EXPECT_GT(local.evicted, 0);
      EXPECT_EQ(remote.evicted_at, local.evicted_at) << "lag " << lag;
      EXPECT_EQ(remote.nll_sum, local.nll_sum);
      EXPECT_EQ(remote.live_sum, local.live_sum);
      EXPECT_EQ(remote.peak_live, local.peak_live);
      EXPECT_EQ(remote.deferred, local.deferred);
      EXPECT_EQ(local.deferred,
                c.decide_every == 1
                    ? 0
                    : local.predicted - local.predicted / c.decide_every);
    }
  }
}

TEST_F(GrpcDeciderTest, ServerRejectionIsReported) {
  SessionConfig config = EngineSessionConfig(model_->config(), 24);
  config.shape.head_dim = 16;  // The engine sends 8: every step is rejected.
  auto session = grpc_->Open(config);
  ASSERT_OK(session);
  EvaluateOptions options;
  EXPECT_STATUS_CODE(
      EvaluateSequence(*model_, tokens_[0], session->get(), options),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(GrpcDeciderTest, SameTierMovesAsInProcess) {
  // With a demote tier, core in this process and the server reached through
  // the wire and the client library must give the engine the same moves,
  // step by step and in the same order (evicted, demoted, promoted), so the
  // same per-token NLL to the bit. The in-process run is the expectation.
  struct TierCase {
    ScoringCase scoring;
    double margin;
    int64_t max_promotions;
  };
  const std::vector<TierCase> cases = {
      {{"tova+fixed", 0, QueryForm::kPerHead, {}, 1, 1, false}, 0.0, 8},
      {{"rkv+fixed", 0, QueryForm::kPerHead, {}, 1, 1, false}, 0.01, 2},
      {{"affinity+entropy", 0, QueryForm::kPerHead, {}, 1, 1, false}, 0.0, 8},
      // Sketched, three scored layers, deciding every 4th step: the client
      // library sketches and skips queries, the in-process decider does so
      // itself.
      {{"tova+fixed", 4, QueryForm::kPerHead, {0, 2, 4}, 4, 1, false}, 0.0, 4},
  };
  for (const TierCase& c : cases) {
    SessionConfig config = EngineSessionConfig(model_->config(), 24);
    ASSERT_OK(ApplyPolicyName(c.scoring.policy, &config));
    c.scoring.ApplyTo(&config);
    config.tier.capacity = 24;
    config.tier.promote_margin = c.margin;
    config.tier.max_promotions = c.max_promotions;
    SCOPED_TRACE(absl::StrCat(c.scoring.Describe(config), " m=", c.margin,
                              " P=", c.max_promotions));
    int64_t promoted = 0;
    for (int story = 0; story < 2; ++story) {
      for (int lag : {0, 1}) {
        SCOPED_TRACE(absl::StrCat("story ", story, " lag ", lag));
        std::vector<StepMoves> local_moves, remote_moves;
        ASSERT_OK_AND_ASSIGN(
            SequenceResult local,
            RunTier(local_.get(), config, story, lag, &local_moves));
        ASSERT_OK_AND_ASSIGN(
            SequenceResult remote,
            RunTier(grpc_.get(), config, story, lag, &remote_moves));
        // The run exercises the tier: entries go to the host tier, and
        // some are evicted (from the device or the host).
        EXPECT_GT(local.demoted, 0);
        EXPECT_GT(local.evicted, 0);
        promoted += local.promoted;
        ASSERT_EQ(remote_moves.size(), local_moves.size());
        for (size_t t = 0; t < local_moves.size(); ++t) {
          ASSERT_EQ(remote_moves[t], local_moves[t]) << "step " << t + 1;
        }
        EXPECT_EQ(remote.nll, local.nll);
        EXPECT_EQ(remote.live_sum, local.live_sum);
        EXPECT_EQ(remote.evicted, local.evicted);
        EXPECT_EQ(remote.demoted, local.demoted);
        EXPECT_EQ(remote.promoted, local.promoted);
        EXPECT_EQ(remote.peak_host, local.peak_host);
        EXPECT_EQ(remote.deferred, local.deferred);
      }
    }
    // And some come back.
    EXPECT_GT(promoted, 0);
  }
}

}  // namespace
}  // namespace entrokv::tinyllama
