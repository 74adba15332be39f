// The in-process decider with cheaper scoring (sketched keys and queries,
// group-sum queries, a subset of layers, a decision cadence, block summaries):
// it must evict exactly as entrokv core does when fed what an engine would
// send — the scored layers, selected here by index arithmetic, projected by
// entrokv::Sketcher, and no queries or entropy on a step that decides nothing.

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/session.h"
#include "entrokv/core/sketch.h"
#include "gtest/gtest.h"
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

// One step as the engine reported it, and the decider's answer.
struct RecordedStep {
  uint64_t step = 0;
  uint64_t slot = 0;
  std::vector<float> keys;     // Every model layer.
  std::vector<float> queries;  // Every model layer.
  double entropy = 0.0;
  Decision decision;
};

// Passes every step on to `inner` and keeps a copy of it and of the answer.
class RecordingSession : public DeciderSession {
 public:
  RecordingSession(std::unique_ptr<DeciderSession> inner,
                   std::vector<RecordedStep>* steps)
      : inner_(std::move(inner)), steps_(steps) {}

  absl::Status Step(const DecisionRequest& request,
                    Decision* decision) override {
    absl::Status status = inner_->Step(request, decision);
    if (!status.ok()) return status;
    RecordedStep r;
    r.step = request.step;
    r.slot = request.slot;
    r.keys.assign(request.keys.begin(), request.keys.end());
    r.queries.assign(request.queries.begin(), request.queries.end());
    r.entropy = request.entropy;
    r.decision = *decision;
    steps_->push_back(std::move(r));
    return absl::OkStatus();
  }
  absl::Status Close() override { return inner_->Close(); }

 private:
  std::unique_ptr<DeciderSession> inner_;
  std::vector<RecordedStep>* steps_;
};

// Rows `layers` of a [model layer][rows x head_dim] vector, picked by hand.
std::vector<float> PickLayers(const std::vector<float>& all, int model_layers,
                              const std::vector<int32_t>& layers) {
  if (layers.empty()) return all;
  const size_t per_layer = all.size() / model_layers;
  std::vector<float> out;
  for (int32_t l : layers) {
    for (size_t i = 0; i < per_layer; ++i)
      out.push_back(all[l * per_layer + i]);
  }
  return out;
}

absl::Span<const std::byte> Bytes(const std::vector<float>& v) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(v.data()),
                             v.size() * sizeof(float));
}

class SketchDeciderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = DataDirOrEmpty();
    ENTROKV_SKIP_WITHOUT_DATA(data_);
    ASSERT_OK_AND_ASSIGN(TestData loaded, LoadTestData(data_, 1, 200));
    model_ = std::move(loaded.model);
    tokens_ = std::move(loaded.stories[0]);
    ASSERT_OK_AND_ASSIGN(decider_, CreateInProcessDecider());
  }

  SessionConfig Config(const char* policy, int64_t budget) const {
    SessionConfig config = EngineSessionConfig(model_->config(), budget);
    EXPECT_OK(ApplyPolicyName(policy, &config));
    return config;
  }

  // Evaluates the story through the in-process decider, recording each step.
  absl::StatusOr<SequenceResult> Record(const SessionConfig& config,
                                        std::vector<RecordedStep>* steps) {
    auto inner = decider_->Open(config);
    if (!inner.ok()) return inner.status();
    RecordingSession session(std::move(*inner), steps);
    EvaluateOptions options;
    options.record_evictions = true;
    return EvaluateSequence(*model_, tokens_, &session, options);
  }

  std::string data_;
  std::unique_ptr<Model> model_;
  std::vector<int> tokens_;
  std::unique_ptr<Decider> decider_;
};

TEST_F(SketchDeciderTest, EvictsAsCoreFedWithSketcherOutput) {
  const int model_layers = model_->config().layers;
  const std::vector<ScoringCase> cases = {
      {"entropy", 4, QueryForm::kGroupSum, {}, 1, 1, false},
      {"affinity", 2, QueryForm::kPerHead, {0, 2, 4}, 1, 1, false},
      {"tova", 4, QueryForm::kPerHead, {1, 3}, 4, 1, false},
      {"entropy", 3, QueryForm::kGroupSum, {}, 16, 1, false},
      {"keynorm", 2, QueryForm::kGroupSum, {4}, 1, 4, true},
      {"h2o", 0, QueryForm::kPerHead, {}, 4, 4, false},
  };
  for (const ScoringCase& c : cases) {
    SessionConfig config = Config(c.policy, 32);
    c.ApplyTo(&config);
    config.projection_seed = 7;
    SCOPED_TRACE(c.Describe(config));
    std::vector<RecordedStep> steps;
    ASSERT_OK_AND_ASSIGN(SequenceResult result, Record(config, &steps));
    EXPECT_GT(result.evicted, 0);
    ASSERT_EQ(steps.size(), tokens_.size() - 1);

    // The same steps, straight into core.
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> backend,
                         CreateBackend(BackendKind::kCpu));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SessionState> core,
                         backend->CreateSession(config, {}));
    ASSERT_OK_AND_ASSIGN(Sketcher sketcher, Sketcher::Create(config));
    int64_t deferred = 0;
    for (size_t t = 0; t < steps.size(); ++t) {
      const RecordedStep& s = steps[t];
      std::vector<float> keys, queries;
      sketcher.Keys(PickLayers(s.keys, model_layers, c.layers), 1, &keys);
      const bool decides = (t + 1) % c.decide_every == 0;
      StepInput input;
      input.step = s.step;
      input.append.slot_ids = absl::MakeConstSpan(&s.slot, 1);
      input.append.keys = Bytes(keys);
      if (decides) {
        sketcher.Queries(PickLayers(s.queries, model_layers, c.layers),
                         &queries);
        input.queries = Bytes(queries);
        input.entropy = s.entropy;
      }
      StepResult want;
      ASSERT_OK(core->Step(input, &want));
      EXPECT_EQ(s.decision.evicted, want.evicted) << "step " << s.step;
      EXPECT_EQ(s.decision.live, want.live) << "step " << s.step;
      EXPECT_EQ(s.decision.deferred, !decides) << "step " << s.step;
      deferred += want.deferred ? 1 : 0;
    }
    EXPECT_EQ(result.deferred, deferred);
    EXPECT_EQ(deferred,
              static_cast<int64_t>(steps.size()) -
                  static_cast<int64_t>(steps.size()) / c.decide_every);
  }
}

TEST_F(SketchDeciderTest, SketchedKeysChangeTheRankingButNotTheWindow) {
  // Window ranks by age alone: a sketch cannot change its evictions. Affinity
  // reads the scores: a 2-column sketch of 8 must change some.
  std::vector<RecordedStep> unused;
  for (const char* policy : {"window", "affinity"}) {
    SessionConfig exact = Config(policy, 24);
    SessionConfig sketched = exact;
    sketched.shape.sketch_dim = 2;
    ASSERT_OK_AND_ASSIGN(SequenceResult a, Record(exact, &unused));
    ASSERT_OK_AND_ASSIGN(SequenceResult b, Record(sketched, &unused));
    if (std::string(policy) == "window") {
      EXPECT_EQ(a.evicted_at, b.evicted_at);
      EXPECT_EQ(a.nll_sum, b.nll_sum);
    } else {
      EXPECT_NE(a.evicted_at, b.evicted_at);
    }
  }
}

TEST_F(SketchDeciderTest, EvictionPositionsFollowTheWindow) {
  // Window B=16: step t evicts position t-16, freed before token t+1 (lag 0)
  // or t+2 (lag 1); an answer still pending after the last token is never
  // applied.
  for (int lag : {0, 1}) {
    ASSERT_OK_AND_ASSIGN(auto session, decider_->Open(Config("window", 16)));
    EvaluateOptions options;
    options.lag = lag;
    options.record_evictions = true;
    ASSERT_OK_AND_ASSIGN(
        SequenceResult r,
        EvaluateSequence(*model_, tokens_, session.get(), options));
    const int n = static_cast<int>(r.evicted_at.size());
    ASSERT_EQ(n, static_cast<int>(tokens_.size()) - 1);
    for (int p = 0; p < n; ++p) {
      const int at = p + 17 + lag;
      EXPECT_EQ(r.evicted_at[p], at <= n ? at : kNeverEvicted) << p;
    }
  }
}

TEST(SelectScoredLayersTest, PicksRowsAndRejectsLayersBeyondTheModel) {
  // 3 layers of 2 elements.
  const std::vector<float> all = {0, 1, 10, 11, 20, 21};
  std::vector<float> out;
  ASSERT_OK(SelectScoredLayers({0, 2}, 2, all, &out));
  EXPECT_EQ(out, (std::vector<float>{0, 1, 20, 21}));
  ASSERT_OK(SelectScoredLayers({}, 2, all, &out));
  EXPECT_EQ(out, all);
  EXPECT_STATUS_CODE(SelectScoredLayers({3}, 2, all, &out),
                     absl::StatusCode::kInvalidArgument);
  EXPECT_STATUS_CODE(SelectScoredLayers({0}, 4, all, &out),
                     absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace entrokv::tinyllama
