// DecodeBatch: the steps of many sessions in one message, against the real
// server in process and against a server that never answers a step.

#include "entrokv/client/batch.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client_test_util.h"
#include "entrokv/client/client.h"
#include "fake_servers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace entrokv::testing {
namespace {

using ::testing::ElementsAre;

class DecodeBatchTest : public ::testing::TestWithParam<StreamApi> {
 protected:
  void SetUp() override {
    server_ = StartTestServer();
    ASSERT_NE(server_, nullptr);
    client_ = ConnectTo(*server_);
    ASSERT_NE(client_, nullptr);
  }
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(DecodeBatchTest, EverySessionEvictsAsCoreInProcess) {
  constexpr int kSessions = 8;
  auto batch = client_->CreateBatch(GetParam());
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<SessionConfig> configs;
  std::vector<std::vector<StoryStep>> stories;
  const char* policies[] = {"entropy", "h2o", "tova", "window"};
  for (int i = 0; i < kSessions; ++i) {
    SessionConfig config = SmallConfig(policies[i % 4], 16);
    if (i % 2 == 1) config.decide_every = 3;
    auto session = batch->CreateSession(config);
    ASSERT_TRUE(session.ok()) << session.status();
    sessions.push_back(*std::move(session));
    configs.push_back(config);
    stories.push_back(MakeStory(config.shape, 10, 30, /*seed=*/100 + i));
  }
  std::vector<std::vector<std::vector<uint64_t>>> got(kSessions);
  for (size_t t = 0; t < stories[0].size(); ++t) {
    std::vector<BatchStep> steps;
    for (int i = 0; i < kSessions; ++i) {
      steps.push_back({sessions[i].get(), stories[i][t].Request()});
    }
    std::vector<absl::StatusOr<StepOutcome>> outcomes = batch->Step(steps);
    ASSERT_EQ(outcomes.size(), size_t{kSessions});
    for (int i = 0; i < kSessions; ++i) {
      ASSERT_TRUE(outcomes[i].ok()) << outcomes[i].status();
      EXPECT_FALSE(outcomes[i]->fallback);
      got[i].push_back(outcomes[i]->evicted);
    }
  }
  for (int i = 0; i < kSessions; ++i) {
    EXPECT_EQ(got[i], CoreEvictions(configs[i], stories[i])) << "session " << i;
    EXPECT_EQ(sessions[i]->counters().server_steps,
              static_cast<int64_t>(stories[i].size()));
  }
}

TEST_P(DecodeBatchTest, ABadStepFailsAloneAndItsSessionMayRetry) {
  auto batch = client_->CreateBatch(GetParam());
  SessionConfig config = SmallConfig("window", 8);
  auto a = batch->CreateSession(config);
  auto b = batch->CreateSession(config);
  ASSERT_TRUE(a.ok() && b.ok());
  const auto story = MakeStory(config.shape, 0, 2);
  StepRequest bad = story[0].Request();
  bad.keys = VectorView::F32(absl::MakeConstSpan(story[0].keys).subspan(1));
  std::vector<absl::StatusOr<StepOutcome>> outcomes =
      batch->Step({{a->get(), bad}, {b->get(), story[0].Request()}});
  EXPECT_EQ(outcomes[0].status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(outcomes[1].ok());
  // The same session twice, and a session of no batch, are refused.
  auto lone = client_->CreateSession(config);
  ASSERT_TRUE(lone.ok());
  outcomes = batch->Step({{a->get(), story[0].Request()},
                          {a->get(), story[1].Request()},
                          {lone->get(), story[0].Request()}});
  ASSERT_TRUE(outcomes[0].ok()) << outcomes[0].status();
  EXPECT_EQ(outcomes[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outcomes[2].status().code(), absl::StatusCode::kInvalidArgument);
  // A batch session may step on its own too (batch_gather_test.cc).
  auto alone = (*a)->Step(story[1].Request());
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_FALSE(alone->fallback);
  EXPECT_TRUE((*a)->Close().ok());
}

INSTANTIATE_TEST_SUITE_P(BothStreamApis, DecodeBatchTest,
                         ::testing::Values(StreamApi::kSync,
                                           StreamApi::kCallback));

TEST(DecodeBatchFallbackTest, MissedDeadlineFallsBackForEverySessionInIt) {
  SessionConfig config = SmallConfig("entropy", 4);
  config.streaming_sinks = 1;
  SilentBatch silent;
  ASSERT_TRUE(silent.Start(config));
  const auto story = MakeStory(config.shape, 6, 1);
  const absl::Time start = absl::Now();
  auto outcomes = silent.batch->Step({{silent.a.get(), story[0].Request()},
                                      {silent.b.get(), story[0].Request()}});
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(50));
  EXPECT_LT(waited, absl::Seconds(2));
  for (auto& outcome : outcomes) {
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_TRUE(outcome->fallback);
    // Six entries, budget 4, one sink: 1001 and 1002 go.
    EXPECT_THAT(outcome->evicted, ElementsAre(1001, 1002));
  }
  EXPECT_TRUE(silent.a->degraded());
  EXPECT_TRUE(silent.b->degraded());
  EXPECT_EQ(silent.client->counters().fallback_deadline, 2);
}

}  // namespace
}  // namespace entrokv::testing
