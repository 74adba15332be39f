// Determinism and whole-run invariants: SyntheticStream is reproducible bit
// for bit and has the structure it documents; the same seed gives the same
// evictions; every policy keeps its promises over a long synthetic run.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core_test_util.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/synthetic.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::StepBuilder;

SyntheticParams SmallStream(uint64_t seed) {
  SyntheticParams params;
  params.shape.layers = 2;
  params.shape.kv_heads = 2;
  params.shape.q_heads = 4;
  params.shape.head_dim = 16;
  params.seed = seed;
  return params;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(SyntheticStreamTest, SameParamsGiveTheSameStreamBitForBit) {
  SyntheticStream first(SmallStream(11)), second(SmallStream(11));
  SyntheticStep a, b;
  for (int t = 0; t < 1000; ++t) {
    first.Next(&a);
    second.Next(&b);
    ASSERT_EQ(a.index, b.index);
    ASSERT_TRUE(SameBits(a.key, b.key)) << t;
    ASSERT_TRUE(SameBits(a.value, b.value)) << t;
    ASSERT_TRUE(SameBits(a.query, b.query)) << t;
    ASSERT_EQ(std::memcmp(&a.entropy, &b.entropy, sizeof(double)), 0) << t;
    ASSERT_EQ(a.topic, b.topic);
    ASSERT_EQ(a.anchor, b.anchor);
    ASSERT_EQ(a.revisit, b.revisit);
    ASSERT_EQ(a.topic_switch, b.topic_switch);
  }
}

TEST(SyntheticStreamTest, OtherSeedsGiveOtherStreams) {
  SyntheticStream first(SmallStream(11)), second(SmallStream(12));
  SyntheticStep a, b;
  first.Next(&a);
  second.Next(&b);
  EXPECT_FALSE(SameBits(a.key, b.key));
  EXPECT_FALSE(SameBits(a.query, b.query));
}

TEST(SyntheticStreamTest, StepsHaveTheDocumentedShapeAndRanges) {
  const SyntheticParams params = SmallStream(3);
  SyntheticStream stream(params);
  SyntheticStep step;
  int anchors = 0, revisits = 0, switches = 0;
  std::set<int32_t> topics;
  constexpr int kSteps = 4000;
  for (int t = 0; t < kSteps; ++t) {
    stream.Next(&step);
    ASSERT_EQ(step.index, t);
    ASSERT_EQ(step.key.size(), size_t(params.shape.key_elements()));
    ASSERT_EQ(step.value.size(), size_t(params.shape.key_elements()));
    ASSERT_EQ(step.query.size(), size_t(params.shape.query_elements()));
    ASSERT_TRUE(std::isfinite(step.entropy));
    ASSERT_GE(step.entropy, 0.0);
    // The entropy is at least its base; revisits add their share.
    ASSERT_GE(step.entropy, params.entropy_base - 1e-12);
    for (float x : step.key) ASSERT_TRUE(std::isfinite(x));
    for (float x : step.query) ASSERT_TRUE(std::isfinite(x));
    ASSERT_GE(step.topic, 0);
    ASSERT_LT(step.topic, params.topics);
    topics.insert(step.topic);
    anchors += step.anchor;
    revisits += step.revisit;
    switches += step.topic_switch;
  }
  // Loose bounds around the documented rates (binomial, 4000 draws).
  EXPECT_NEAR(anchors / double(kSteps), params.anchor_rate, 0.02);
  EXPECT_NEAR(revisits / double(kSteps), params.revisit_rate, 0.05);
  EXPECT_NEAR(switches, kSteps / params.topic_length, 0.5 * kSteps /
                                                          params.topic_length);
  EXPECT_EQ(topics.size(), size_t(params.topics));  // Topics recur.
}

TEST(SyntheticStreamTest, KeysClusterByTopic) {
  SyntheticParams params = SmallStream(5);
  params.anchor_rate = 0.0;
  SyntheticStream stream(params);
  SyntheticStep step;
  std::vector<std::vector<float>> keys;
  std::vector<int32_t> topic;
  for (int t = 0; t < 600; ++t) {
    stream.Next(&step);
    keys.push_back(step.key);
    topic.push_back(step.topic);
  }
  double same = 0, other = 0;
  int n_same = 0, n_other = 0;
  for (size_t i = 0; i < keys.size(); i += 3) {
    for (size_t j = i + 1; j < keys.size(); j += 7) {
      double d = 0;
      for (size_t e = 0; e < keys[i].size(); ++e) {
        d += (keys[i][e] - keys[j][e]) * (keys[i][e] - keys[j][e]);
      }
      if (topic[i] == topic[j]) {
        same += d;
        ++n_same;
      } else {
        other += d;
        ++n_other;
      }
    }
  }
  ASSERT_GT(n_same, 0);
  ASSERT_GT(n_other, 0);
  EXPECT_LT(same / n_same, 0.8 * other / n_other);
}

// Runs `steps` steps of a synthetic stream through one session and returns
// every step's evictions.
std::vector<std::vector<uint64_t>> RunStream(const SessionConfig& config,
                                             uint64_t stream_seed, int steps) {
  auto backend = CreateBackend(BackendKind::kCpu);
  EXPECT_TRUE(backend.ok());
  auto session = (*backend)->CreateSession(config, {});
  EXPECT_TRUE(session.ok()) << session.status();
  SyntheticParams params = SmallStream(stream_seed);
  params.shape = config.shape;
  SyntheticStream stream(params);
  SyntheticStep step;
  std::vector<std::vector<uint64_t>> evictions;
  for (int t = 0; t < steps; ++t) {
    stream.Next(&step);
    StepBuilder builder(config.shape);
    builder.Append(uint64_t(t) * 3 + 1, step.key).Query(step.query);
    builder.Entropy(step.entropy);
    StepResult result;
    const absl::Status status =
        (*session)->Step(builder.Build(uint64_t(t)), &result);
    EXPECT_TRUE(status.ok()) << status;
    evictions.push_back(result.evicted);
  }
  return evictions;
}

SessionConfig StreamConfig(const char* policy) {
  SessionConfig config;
  config.shape = SmallStream(1).shape;
  config.budget = 40;
  config.seed = 77;
  EXPECT_TRUE(ApplyPolicyName(policy, &config).ok());
  return config;
}

TEST(DeterminismTest, TheSameSeedGivesTheSameEvictions) {
  for (const char* policy : {"entropy", "random", "random+entropy",
                             "h2o+entropy", "tova", "keynorm"}) {
    const SessionConfig config = StreamConfig(policy);
    EXPECT_EQ(RunStream(config, 9, 400), RunStream(config, 9, 400)) << policy;
  }
}

TEST(DeterminismTest, RandomRankingDependsOnItsSeed) {
  SessionConfig config = StreamConfig("random");
  const auto first = RunStream(config, 9, 300);
  config.seed = 78;
  EXPECT_NE(first, RunStream(config, 9, 300));
}

TEST(DeterminismTest, TheEntropyPolicyDependsOnTheStream) {
  const SessionConfig config = StreamConfig("entropy");
  EXPECT_NE(RunStream(config, 9, 300), RunStream(config, 10, 300));
}

// Every pairing over a long run: evictions name only live slots, never twice;
// without protection, token granularity keeps live within the budget; block
// granularity evicts whole blocks of consecutive appends.
class StreamInvariantsTest
    : public ::testing::TestWithParam<
          std::tuple<std::pair<Ranking, BudgetControl>, int32_t>> {};

TEST_P(StreamInvariantsTest, EvictionsAreLiveUniqueAndFitTheBudget) {
  const auto [policy, block] = GetParam();
  const auto [ranking, control] = policy;
  SessionConfig config = StreamConfig("window");
  config.ranking = ranking;
  config.budget_control = control;
  config.block_size = block;
  config.shape.element_type = ElementType::kBf16;
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(config, {}));
  SyntheticParams params = SmallStream(21);
  SyntheticStream stream(params);
  SyntheticStep step;
  std::set<uint64_t> live, gone;
  int64_t live_sum = 0;
  constexpr int kSteps = 500;
  for (int t = 0; t < kSteps; ++t) {
    stream.Next(&step);
    const uint64_t slot = 1000 + uint64_t(t);
    StepBuilder builder(config.shape);
    builder.Append(slot, step.key).Query(step.query).Entropy(step.entropy);
    StepResult result;
    ASSERT_OK(session->Step(builder.Build(uint64_t(t) + 1), &result));
    live.insert(slot);
    for (size_t i = 0; i < result.evicted.size(); ++i) {
      const uint64_t e = result.evicted[i];
      ASSERT_TRUE(live.count(e)) << "not live: " << e;
      live.erase(e);
      gone.insert(e);
      if (i > 0) {
        ASSERT_LT(result.evicted[i - 1], e) << "append order";
      }
    }
    if (block > 1) {
      ASSERT_EQ(result.evicted.size() % block, 0u);
      for (size_t i = 0; i < result.evicted.size(); i += block) {
        ASSERT_EQ((result.evicted[i] - 1000) % block, 0u) << "block start";
        ASSERT_EQ(result.evicted[i + block - 1], result.evicted[i] + block - 1);
      }
      ASSERT_LT(result.live, result.budget + block);
    } else {
      ASSERT_LE(result.live, result.budget);
    }
    ASSERT_EQ(result.live, int64_t(live.size()));
    live_sum += result.live;
  }
  EXPECT_EQ(session->Stats().evicted, int64_t(gone.size()));
  // The controller keeps the mean near B (entropy) or at B (fixed); under a
  // threshold B is a ceiling.
  const double mean_live = double(live_sum) / kSteps;
  if (control == BudgetControl::kThreshold) {
    EXPECT_LE(mean_live, config.budget);
  } else {
    EXPECT_GT(mean_live, 0.5 * config.budget);
    EXPECT_LT(mean_live, 1.5 * config.budget);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllPairings, StreamInvariantsTest,
    ::testing::Combine(::testing::ValuesIn(AllPolicies()),
                       ::testing::Values(1, 4)),
    [](const auto& info) {
      return std::string(RankingName(std::get<0>(info.param).first)) + "_" +
             std::string(BudgetControlName(std::get<0>(info.param).second)) +
             "_b" + std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace entrokv
