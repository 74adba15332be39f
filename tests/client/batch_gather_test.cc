// Sessions of a DecodeBatch stepped with their own Session calls: their steps
// are gathered into one message per decode iteration (batch.h, "Steps of the
// per-session calls"). The messages are counted by the server in process
// (grpc_server_msg_received_total of the Decode method); the evictions are
// compared with core's, run in process.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "client_test_util.h"
#include "entrokv/client/batch.h"
#include "entrokv/client/client.h"
#include "fake_servers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace entrokv::testing {
namespace {

// Decode request messages the server has received (attaches included).
int64_t DecodeMessages(const server::Server& server) {
  for (absl::string_view line :
       absl::StrSplit(server.MetricsText(), '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "grpc_server_msg_received_total{") ||
        !absl::StrContains(line, "grpc_method=\"Decode\"")) {
      continue;
    }
    int64_t value = 0;
    EXPECT_TRUE(absl::SimpleAtoi(line.substr(line.rfind(' ') + 1), &value))
        << line;
    return value;
  }
  return 0;
}

// Waits up to 5 s for the server to have received `count` Decode messages.
bool AwaitDecodeMessages(const server::Server& server, int64_t count) {
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (DecodeMessages(server) < count) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

class BatchGatherTest : public ::testing::TestWithParam<StreamApi> {
 protected:
  void SetUp() override {
    server_ = StartTestServer();
    ASSERT_NE(server_, nullptr);
    client_ = ConnectTo(*server_);
    ASSERT_NE(client_, nullptr);
    batch_ = client_->CreateBatch(GetParam());
  }

  // `n` sessions of the batch, policies in turn, each with its story.
  void MakeSessions(int n, int prefill, int decode) {
    const char* policies[] = {"entropy", "h2o", "tova", "window"};
    for (int i = 0; i < n; ++i) {
      SessionConfig config = SmallConfig(policies[i % 4], 12);
      auto session = batch_->CreateSession(config);
      ASSERT_TRUE(session.ok()) << session.status();
      sessions_.push_back(*std::move(session));
      configs_.push_back(config);
      stories_.push_back(
          MakeStory(config.shape, prefill, decode, /*seed=*/40 + i));
    }
  }

  void ExpectCoreEvictions(
      const std::vector<std::vector<std::vector<uint64_t>>>& got) {
    for (size_t i = 0; i < sessions_.size(); ++i) {
      EXPECT_EQ(got[i], CoreEvictions(configs_[i], stories_[i]))
          << "session " << i;
      EXPECT_EQ(sessions_[i]->counters().server_steps,
                static_cast<int64_t>(stories_[i].size()));
      EXPECT_EQ(sessions_[i]->counters().fallback_steps, 0);
    }
  }

  std::unique_ptr<server::Server> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<DecodeBatch> batch_;
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<SessionConfig> configs_;
  std::vector<std::vector<StoryStep>> stories_;
};

TEST_P(BatchGatherTest, PipelinedSessionsSendOneMessagePerIteration) {
  constexpr int kSessions = 5;
  MakeSessions(kSessions, 8, 20);
  const size_t steps = stories_[0].size();
  std::vector<std::vector<std::vector<uint64_t>>> got(kSessions);
  const int64_t before = DecodeMessages(*server_);
  for (size_t t = 0; t < steps; ++t) {
    for (int i = 0; i < kSessions; ++i) {
      auto previous = sessions_[i]->StepPipelined(stories_[i][t].Request());
      ASSERT_TRUE(previous.ok()) << previous.status();
      ASSERT_EQ(previous->has_value(), t > 0);
      if (previous->has_value()) got[i].push_back((*previous)->evicted);
    }
  }
  for (int i = 0; i < kSessions; ++i) {
    auto last = sessions_[i]->Flush();
    ASSERT_TRUE(last.ok() && last->has_value()) << last.status();
    got[i].push_back((*last)->evicted);
  }
  ExpectCoreEvictions(got);
  // Every call was answered, so every message has arrived.
  EXPECT_EQ(DecodeMessages(*server_) - before, static_cast<int64_t>(steps));
}

TEST_P(BatchGatherTest, AsyncHalvesSendOneMessagePerIteration) {
  constexpr int kSessions = 3;
  MakeSessions(kSessions, 5, 12);
  const size_t steps = stories_[0].size();
  std::vector<std::vector<std::vector<uint64_t>>> got(kSessions);
  const int64_t before = DecodeMessages(*server_);
  for (size_t t = 0; t < steps; ++t) {
    for (int i = 0; i < kSessions; ++i) {
      ASSERT_TRUE(sessions_[i]->StepAsync(stories_[i][t].Request()).ok());
    }
    for (int i = 0; i < kSessions; ++i) {
      auto outcome = sessions_[i]->Collect();
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      EXPECT_EQ(outcome->step, t);
      got[i].push_back(outcome->evicted);
    }
  }
  ExpectCoreEvictions(got);
  EXPECT_EQ(DecodeMessages(*server_) - before, static_cast<int64_t>(steps));
}

TEST_P(BatchGatherTest, BlockingStepsSendOneMessageEach) {
  constexpr int kSessions = 2;
  MakeSessions(kSessions, 4, 6);
  const size_t steps = stories_[0].size();
  std::vector<std::vector<std::vector<uint64_t>>> got(kSessions);
  const int64_t before = DecodeMessages(*server_);
  for (size_t t = 0; t < steps; ++t) {
    for (int i = 0; i < kSessions; ++i) {
      auto outcome = sessions_[i]->Step(stories_[i][t].Request());
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      got[i].push_back(outcome->evicted);
    }
  }
  ExpectCoreEvictions(got);
  EXPECT_EQ(DecodeMessages(*server_) - before,
            static_cast<int64_t>(steps * kSessions));
}

TEST_P(BatchGatherTest, AnIdleOpenSessionHoldsTheMessageUntilACallNeedsIt) {
  MakeSessions(2, 14, 3);  // Budget 12: the prefill evicts.
  Session& a = *sessions_[0];
  std::vector<std::vector<uint64_t>> got;
  int64_t live = 0;  // As the server reports it.
  auto collect = [&]() {
    auto outcome = a.Collect();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_FALSE(outcome->fallback);
    got.push_back(outcome->evicted);
    live = outcome->live;
  };
  const int64_t before = DecodeMessages(*server_);
  ASSERT_TRUE(a.StepAsync(stories_[0][0].Request()).ok());
  // Session 1 is open and has not stepped: nothing leaves.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(DecodeMessages(*server_), before);
  // A call that needs the answer sends it.
  collect();
  EXPECT_EQ(DecodeMessages(*server_), before + 1);
  // So does the session's next step: step 1 goes when step 2 is gathered.
  ASSERT_TRUE(a.StepAsync(stories_[0][1].Request()).ok());
  ASSERT_TRUE(a.StepAsync(stories_[0][2].Request()).ok());
  EXPECT_TRUE(AwaitDecodeMessages(*server_, before + 2));
  collect();
  // Once session 1 is closed, a's steps are every open session's: step 2
  // leaves with the close, step 3 when gathered.
  ASSERT_TRUE(sessions_[1]->Close().ok());
  EXPECT_TRUE(AwaitDecodeMessages(*server_, before + 3));
  collect();
  ASSERT_TRUE(a.StepAsync(stories_[0][3].Request()).ok());
  EXPECT_TRUE(AwaitDecodeMessages(*server_, before + 4));
  collect();
  EXPECT_EQ(got, CoreEvictions(configs_[0], stories_[0]));
  EXPECT_EQ(static_cast<int64_t>(a.LiveSlots().size()), live);
}

TEST_P(BatchGatherTest, BatchStepSendsTheGatheredStepsFirst) {
  MakeSessions(3, 6, 2);
  const int64_t before = DecodeMessages(*server_);
  // Session 0 gathers step 0 by itself; Step() steps sessions 1 and 2, and
  // refuses session 0 (a step in flight).
  ASSERT_TRUE(sessions_[0]->StepAsync(stories_[0][0].Request()).ok());
  std::vector<absl::StatusOr<StepOutcome>> outcomes =
      batch_->Step({{sessions_[1].get(), stories_[1][0].Request()},
                    {sessions_[2].get(), stories_[2][0].Request()},
                    {sessions_[0].get(), stories_[0][1].Request()}});
  ASSERT_TRUE(outcomes[0].ok()) << outcomes[0].status();
  ASSERT_TRUE(outcomes[1].ok()) << outcomes[1].status();
  EXPECT_EQ(outcomes[2].status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Session 0's message went before Step's, and is answered.
  EXPECT_EQ(DecodeMessages(*server_) - before, 2);
  auto first = sessions_[0]->Collect();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->fallback);
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::vector<uint64_t>> expected =
        CoreEvictions(configs_[i], stories_[i]);
    const std::vector<uint64_t>& got =
        i == 0 ? first->evicted : outcomes[i - 1]->evicted;
    EXPECT_EQ(got, expected[0]) << "session " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(BothStreamApis, BatchGatherTest,
                         ::testing::Values(StreamApi::kSync,
                                           StreamApi::kCallback));

TEST(BatchGatherFallbackTest, AMissedDeadlineDegradesEverySessionInTheMessage) {
  SessionConfig config = SmallConfig("entropy", 4);
  config.streaming_sinks = 1;
  SilentBatch silent;
  ASSERT_TRUE(silent.Start(config));
  Session* a = silent.a.get();
  Session* b = silent.b.get();
  const auto story = MakeStory(config.shape, 6, 1);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(a->StepAsync(story[0].Request()).ok());
  ASSERT_TRUE(b->StepAsync(story[0].Request()).ok());
  for (Session* session : {a, b}) {
    auto outcome = session->Collect();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_TRUE(outcome->fallback);
    // Six entries, budget 4, one sink: 1001 and 1002 go.
    EXPECT_THAT(outcome->evicted, ::testing::ElementsAre(1001, 1002));
    EXPECT_TRUE(session->degraded());
  }
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(50));
  EXPECT_LT(waited, absl::Seconds(2));
  EXPECT_EQ(silent.client->counters().fallback_deadline, 2);
  // The next steps are decided locally, at once.
  ASSERT_TRUE(a->StepAsync(story[1].Request()).ok());
  auto local = a->Collect();
  ASSERT_TRUE(local.ok());
  EXPECT_TRUE(local->fallback);
  EXPECT_EQ(a->counters().fallback_degraded, 1);
}

TEST(BatchGatherFallbackTest, PipelinedSessionsEachCountTheMissedDeadline) {
  const SessionConfig config = SmallConfig("entropy", 4);
  SilentBatch silent;
  ASSERT_TRUE(silent.Start(config));
  Session* a = silent.a.get();
  Session* b = silent.b.get();
  const auto story = MakeStory(config.shape, 6, 2);
  for (Session* session : {a, b}) {
    auto none = session->StepPipelined(story[0].Request());
    ASSERT_TRUE(none.ok() && !none->has_value());
  }
  // Step 0's message is never answered. a's collect ends the stream, which
  // degrades b before b collects its own step 0: both count the deadline.
  for (Session* session : {a, b}) {
    auto previous = session->StepPipelined(story[1].Request());
    ASSERT_TRUE(previous.ok() && previous->has_value()) << previous.status();
    EXPECT_TRUE((*previous)->fallback);
  }
  EXPECT_EQ(silent.client->counters().fallback_deadline, 2);
  for (Session* session : {a, b}) {
    auto last = session->Flush();
    ASSERT_TRUE(last.ok() && last->has_value());
    EXPECT_TRUE((*last)->fallback);
  }
  EXPECT_EQ(silent.client->counters().fallback_deadline, 2);
}

TEST(BatchGatherFallbackTest, ASessionOutlivingItsBatchDecidesItsStepsLocally) {
  auto server = StartTestServer();
  ASSERT_NE(server, nullptr);
  ClientOptions client_options;
  client_options.target = server->targets()[0];
  auto client = Client::Connect(client_options);
  ASSERT_TRUE(client.ok());
  auto batch = (*client)->CreateBatch();
  SessionConfig config = SmallConfig("window", 4);
  auto a = batch->CreateSession(config);
  auto b = batch->CreateSession(config);
  ASSERT_TRUE(a.ok() && b.ok());
  const auto story = MakeStory(config.shape, 6, 1);
  // Gathered, never sent: b has not stepped.
  ASSERT_TRUE((*a)->StepAsync(story[0].Request()).ok());
  batch.reset();
  auto outcome = (*a)->Collect();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(outcome->fallback);
  EXPECT_EQ((*a)->LiveSlots().size(), 4u);
  EXPECT_EQ((*a)->StepAsync(story[1].Request()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*b)->Step(story[0].Request()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*a)->Close().ok());
}

}  // namespace
}  // namespace entrokv::testing
