// The C++ stories260K forward pass against the independent numpy reference:
// full cache, and with entries really evicted (a window with an attention
// sink), in the immediate and the pipelined (one step late) modes.

#include "tinyllama/model.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "tests/eval/reference.h"
#include "tests/testing/status_matchers.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/tokenizer.h"

namespace entrokv::tinyllama {
namespace {

using ::entrokv::tinyllama::testing::DataDirOrEmpty;
using ::entrokv::tinyllama::testing::ReferenceNll;

std::vector<char> Header(std::vector<int32_t> fields) {
  std::vector<char> bytes(fields.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), fields.data(), bytes.size());
  return bytes;
}

TEST(ModelLoadTest, MissingFileIsNotFound) {
  EXPECT_STATUS_CODE(Model::Load("/nonexistent/stories260K.bin"),
                     absl::StatusCode::kNotFound);
}

TEST(ModelLoadTest, RejectsShortHeader) {
  EXPECT_STATUS_CODE(Model::FromBytes(std::vector<char>(10)),
                     absl::StatusCode::kInvalidArgument);
}

TEST(ModelLoadTest, RejectsSeparateClassifierAndBadShapes) {
  // vocab_size < 0 marks an unshared classifier, which this engine refuses.
  EXPECT_STATUS_CODE(Model::FromBytes(Header({64, 172, 5, 8, 4, -512, 512})),
                     absl::StatusCode::kInvalidArgument);
  // 8 heads do not divide into 3 kv heads.
  EXPECT_STATUS_CODE(Model::FromBytes(Header({64, 172, 5, 8, 3, 512, 512})),
                     absl::StatusCode::kInvalidArgument);
}

TEST(ModelLoadTest, RejectsWrongSizeNamingTheExpectedOne) {
  auto model = Model::FromBytes(Header({64, 172, 5, 8, 4, 512, 512}));
  EXPECT_STATUS_CODE(model, absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("1056540"), std::string::npos)
      << model.status();
}

class ModelReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = DataDirOrEmpty();
    ENTROKV_SKIP_WITHOUT_DATA(data_);
    ENTROKV_SKIP_WITHOUT_PYTHON();
    ASSERT_OK_AND_ASSIGN(Model model, Model::Load(ModelPath(data_)));
    model_ = std::make_unique<Model>(std::move(model));
    ASSERT_OK_AND_ASSIGN(
        Tokenizer tokenizer,
        Tokenizer::Load(TokenizerPath(data_), model_->config().vocab_size));
    tokenizer_ = std::make_unique<Tokenizer>(std::move(tokenizer));
    ASSERT_OK_AND_ASSIGN(stories_, LoadStories(StoriesPath(data_), 3));
  }

  std::vector<int> Tokens(int story) const {
    return StoryTokens(*tokenizer_, stories_[story], model_->config().seq_len);
  }

  std::string data_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::string> stories_;
};

TEST_F(ModelReferenceTest, ReadsStories260KShape) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.layers, 5);
  EXPECT_EQ(c.heads, 8);
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.head_dim(), 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
}

TEST_F(ModelReferenceTest, FullCacheNllMatchesReference) {
  ASSERT_OK_AND_ASSIGN(auto reference, ReferenceNll(data_, "--stories 3"));
  ASSERT_EQ(reference.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const std::vector<int> tokens = Tokens(i);
    ASSERT_EQ(static_cast<int>(tokens.size()), reference[i].tokens);
    ASSERT_OK_AND_ASSIGN(SequenceResult r,
                         EvaluateSequence(*model_, tokens, nullptr, {}));
    EXPECT_EQ(r.predicted, reference[i].tokens - 1);
    EXPECT_NEAR(r.nll_sum, reference[i].nll_sum, 1e-4 * reference[i].nll_sum)
        << "story " << i;
    // Nothing evicted: token t attends over t + 1 entries.
    EXPECT_EQ(r.evicted, 0);
    EXPECT_EQ(r.live_sum, r.predicted * (r.predicted + 1) / 2);
  }
}

// Keeps the first entry and the `window` most recent ones after every step,
// independently of entrokv: the engine side of eviction, checked alone.
class SinkWindowSession : public DeciderSession {
 public:
  explicit SinkWindowSession(int window) : window_(window) {}

  absl::Status Step(const DecisionRequest& request,
                    Decision* decision) override {
    live_.push_back({request.slot, position_++});
    decision->evicted.clear();
    std::vector<Entry> kept;
    for (const Entry& e : live_) {
      if (e.position == 0 || position_ - 1 - e.position < window_) {
        kept.push_back(e);
      } else {
        decision->evicted.push_back(e.slot);
      }
    }
    live_ = kept;
    decision->live = static_cast<int64_t>(live_.size());
    return absl::OkStatus();
  }
  absl::Status Close() override { return absl::OkStatus(); }

 private:
  struct Entry {
    uint64_t slot;
    int position;
  };
  int window_;
  int position_ = 0;
  std::vector<Entry> live_;
};

TEST_F(ModelReferenceTest, EvictedEntriesAreNotAttended) {
  constexpr int kWindow = 16;
  // Step t keeps {0} ∪ {t-15..t}: token s attends to j == 0 or s - j <= 16.
  ASSERT_OK_AND_ASSIGN(auto reference,
                       ReferenceNll(data_, "--stories 2 --window 16 --sink"));
  ASSERT_OK_AND_ASSIGN(auto full, ReferenceNll(data_, "--stories 2"));
  for (int i = 0; i < 2; ++i) {
    SinkWindowSession session(kWindow);
    ASSERT_OK_AND_ASSIGN(SequenceResult r,
                         EvaluateSequence(*model_, Tokens(i), &session, {}));
    EXPECT_NEAR(r.nll_sum, reference[i].nll_sum, 1e-4 * reference[i].nll_sum)
        << "story " << i;
    // The window really changes the result.
    EXPECT_GT(std::abs(reference[i].nll_sum - full[i].nll_sum),
              1e-2 * full[i].nll_sum);
    EXPECT_EQ(r.peak_live, kWindow + 2);  // Sink + window + the new token.
  }
}

TEST_F(ModelReferenceTest, PipelinedEvictionsApplyOneTokenLater) {
  // With lag 1, token s still sees step s-1's victims: s - j <= 17.
  ASSERT_OK_AND_ASSIGN(auto reference,
                       ReferenceNll(data_, "--stories 2 --window 17 --sink"));
  for (int i = 0; i < 2; ++i) {
    SinkWindowSession session(16);
    EvaluateOptions options;
    options.lag = 1;
    ASSERT_OK_AND_ASSIGN(SequenceResult r, EvaluateSequence(*model_, Tokens(i),
                                                            &session, options));
    EXPECT_NEAR(r.nll_sum, reference[i].nll_sum, 1e-4 * reference[i].nll_sum)
        << "story " << i;
    EXPECT_EQ(r.peak_live, 16 + 3);
  }
}

TEST_F(ModelReferenceTest, RejectsBadTokensAndLengths) {
  KvCache cache = model_->NewCache();
  ForwardOutput out;
  EXPECT_STATUS_CODE(model_->Forward(512, 0, &cache, &out),
                     absl::StatusCode::kInvalidArgument);
  EXPECT_STATUS_CODE(model_->Forward(1, 512, &cache, &out),
                     absl::StatusCode::kInvalidArgument);
  EXPECT_STATUS_CODE(
      EvaluateSequence(*model_, std::vector<int>{1}, nullptr, {}),
      absl::StatusCode::kInvalidArgument);
  EXPECT_STATUS_CODE(
      EvaluateSequence(*model_, std::vector<int>(513, 1), nullptr, {}),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace entrokv::tinyllama
