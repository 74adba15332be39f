// entrokv::Client and entrokv::Session against the real server in process,
// over both stream APIs. Reference evictions come from core run in process on
// the same inputs; fallback evictions are worked out by hand.

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client_test_util.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "fake_servers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::CoreEvictions;
using ::entrokv::testing::MakeStory;
using ::entrokv::testing::Serve;
using ::entrokv::testing::SilentService;
using ::entrokv::testing::SmallConfig;
using ::entrokv::testing::StoryStep;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

class ClientSessionTest : public ::testing::TestWithParam<StreamApi> {
 protected:
  void SetUp() override {
    server_ = testing::StartTestServer();
    ASSERT_NE(server_, nullptr);
    client_ = testing::ConnectTo(*server_);
    ASSERT_NE(client_, nullptr);
  }

  SessionOptions Options() const {
    SessionOptions options;
    options.stream_api = GetParam();
    options.step_deadline = absl::Seconds(10);
    return options;
  }

  std::unique_ptr<server::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(ClientSessionTest, LifecycleCreateStepInspectListClose) {
  const SessionConfig config = SmallConfig("window", 4);
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(config, Options(), "story-1"));
  EXPECT_EQ(session->id(), "story-1");
  EXPECT_FALSE(session->degraded());
  const auto story = MakeStory(config.shape, 0, 6);
  for (const StoryStep& step : story) {
    ASSERT_OK(session->Step(step.Request()));
  }
  ASSERT_OK_AND_ASSIGN(SessionInfo info, client_->GetSession("story-1"));
  EXPECT_EQ(info.stats.live, 4);
  EXPECT_EQ(info.stats.steps, 6);
  EXPECT_EQ(info.stats.appended, 6);
  EXPECT_EQ(info.stats.evicted, 2);
  EXPECT_EQ(info.stats.last_step, std::optional<uint64_t>(5));
  EXPECT_TRUE(info.attached);
  EXPECT_EQ(info.config.budget, 4);
  EXPECT_EQ(info.config.ranking, Ranking::kWindow);
  // The window keeps the four newest: 1002..1005.
  EXPECT_THAT(session->LiveSlots(), ElementsAre(1002, 1003, 1004, 1005));
  ASSERT_OK_AND_ASSIGN(auto sessions, client_->ListSessions());
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions[0].id, "story-1");

  ASSERT_OK(session->Close());
  EXPECT_STATUS_CODE(client_->GetSession("story-1"),
                     absl::StatusCode::kNotFound);
  EXPECT_STATUS_CODE(session->Step(story[0].Request()),
                     absl::StatusCode::kFailedPrecondition);
  const SessionCounters counters = session->counters();
  EXPECT_EQ(counters.server_steps, 6);
  EXPECT_EQ(counters.fallback_steps, 0);
  EXPECT_EQ(counters.evicted_by_server, 2);
  EXPECT_GT(counters.bytes_sent, 6 * 2 * 2 * 2 * 8);  // Keys alone, in f16.
}

TEST_P(ClientSessionTest, ShadowsAreRequestedAndReported) {
  const SessionConfig config = SmallConfig("window", 4);
  SessionOptions options = Options();
  // A shadow's shape and cadence are the session's, whatever it says.
  SessionConfig shadow = SmallConfig("window", 2);
  shadow.shape.head_dim *= 2;
  shadow.decide_every = 3;
  options.shadowing.policies = {shadow, SmallConfig("streaming", 4)};
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(config, options, "shadowed"));
  const auto story = MakeStory(config.shape, 0, 6);
  for (const StoryStep& step : story) {
    ASSERT_OK(session->Step(step.Request()));
  }
  // The shadows' work for a step runs after its reply: wait for the last.
  SessionInfo info;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_OK_AND_ASSIGN(info, client_->GetSession("shadowed"));
    if (info.shadows.has_value() && info.shadows->steps_observed == 6) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(info.shadows.has_value());
  EXPECT_EQ(info.shadows->steps_observed, 6);
  ASSERT_EQ(info.shadows->shadows.size(), 2u);
  EXPECT_EQ(info.shadows->shadows[0].policy, "window+fixed");
  EXPECT_EQ(info.shadows->shadows[0].config.budget, 2);
  EXPECT_EQ(info.shadows->shadows[0].config.shape.head_dim,
            config.shape.head_dim);
  EXPECT_EQ(info.shadows->shadows[0].live, 2);
  EXPECT_EQ(info.shadows->shadows[1].policy, "streaming+fixed");
  EXPECT_EQ(info.shadows->primary.policy, "window+fixed");
  EXPECT_EQ(info.shadows->primary.recall.steps, 6);
  EXPECT_EQ(info.shadows->reference_entries, 6);
  // The newest 2 against the newest 4: Jaccard 1 while both hold all, then
  // 2/3 and 2/4 (steps 0-1: 1, step 2: 2/3, steps 3-5: 1/2).
  EXPECT_NEAR(info.shadows->shadows[0].mean_jaccard,
              (1.0 + 1.0 + 2.0 / 3.0 + 3 * 0.5) / 6.0, 1e-12);
  ServerInfo server;
  ASSERT_OK(client_->ListSessions(&server).status());
  EXPECT_EQ(server.max_shadows, 4);
  ASSERT_OK(session->Close());
}

TEST_P(ClientSessionTest, EvictionsEqualCoreInProcessForEveryPolicy) {
  for (const char* policy : {"window", "streaming", "h2o", "tova", "keynorm",
                             "random", "affinity", "entropy", "h2o+entropy"}) {
    SCOPED_TRACE(policy);
    SessionConfig config = SmallConfig(policy, 12);
    config.protection.sinks = 1;
    config.seed = 99;
    const auto story = MakeStory(config.shape, 20, 40);
    const auto expected = CoreEvictions(config, story);
    ASSERT_OK_AND_ASSIGN(auto session,
                         client_->CreateSession(config, Options()));
    for (size_t t = 0; t < story.size(); ++t) {
      ASSERT_OK_AND_ASSIGN(StepOutcome outcome,
                           session->Step(story[t].Request()));
      EXPECT_EQ(outcome.step, t);
      EXPECT_FALSE(outcome.fallback);
      ASSERT_EQ(outcome.evicted, expected[t]) << "step " << t;
    }
    ASSERT_OK(session->Close());
  }
}

TEST_P(ClientSessionTest, PipelinedModeEqualsBlockingModeShiftedByOneStep) {
  const SessionConfig config = SmallConfig("entropy", 10);
  const auto story = MakeStory(config.shape, 16, 30);
  ASSERT_OK_AND_ASSIGN(auto blocking,
                       client_->CreateSession(config, Options()));
  ASSERT_OK_AND_ASSIGN(auto pipelined,
                       client_->CreateSession(config, Options()));
  std::vector<StepOutcome> expected;
  for (const StoryStep& step : story) {
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome, blocking->Step(step.Request()));
    expected.push_back(outcome);
  }
  std::vector<StepOutcome> late;
  for (size_t t = 0; t < story.size(); ++t) {
    ASSERT_OK_AND_ASSIGN(std::optional<StepOutcome> previous,
                         pipelined->StepPipelined(story[t].Request()));
    // Call t answers step t - 1: nothing on the first call.
    ASSERT_EQ(previous.has_value(), t > 0) << "call " << t;
    if (previous.has_value()) late.push_back(*previous);
    EXPECT_EQ(pipelined->in_flight(), 1);
  }
  ASSERT_OK_AND_ASSIGN(std::optional<StepOutcome> last, pipelined->Flush());
  ASSERT_TRUE(last.has_value());
  late.push_back(*last);
  EXPECT_EQ(pipelined->in_flight(), 0);

  ASSERT_EQ(late.size(), expected.size());
  int64_t evictions = 0;
  for (size_t t = 0; t < expected.size(); ++t) {
    EXPECT_EQ(late[t].step, expected[t].step);
    EXPECT_EQ(late[t].evicted, expected[t].evicted) << "step " << t;
    EXPECT_EQ(late[t].live, expected[t].live);
    EXPECT_EQ(late[t].budget, expected[t].budget);
    evictions += static_cast<int64_t>(late[t].evicted.size());
  }
  EXPECT_GT(evictions, 20);  // The comparison covered real decisions.
}

TEST_P(ClientSessionTest, RejectedStepLeavesTheSessionAsItWas) {
  const SessionConfig config = SmallConfig("tova", 4);
  ASSERT_OK_AND_ASSIGN(auto session, client_->CreateSession(config, Options()));
  auto story = MakeStory(config.shape, 0, 6);
  ASSERT_OK(session->Step(story[0].Request()));
  const int64_t sent_before = session->counters().bytes_sent;

  // Caught by the client: nothing is sent.
  StoryStep short_keys = story[1];
  short_keys.keys.pop_back();
  EXPECT_STATUS_CODE(session->Step(short_keys.Request()),
                     absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->counters().bytes_sent, sent_before);
  EXPECT_EQ(session->next_step(), 1u);

  // Caught by the server: an infinite query element.
  StoryStep bad_query = story[1];
  bad_query.query[3] = std::numeric_limits<float>::infinity();
  absl::StatusOr<StepOutcome> rejected = session->Step(bad_query.Request());
  EXPECT_STATUS_CODE(rejected, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rejected.status().message()),
              ::testing::HasSubstr("queries"));
  EXPECT_EQ(session->next_step(), 1u);
  EXPECT_THAT(session->LiveSlots(), ElementsAre(1000));

  // The corrected step takes the same number and the same slot id.
  ASSERT_OK_AND_ASSIGN(StepOutcome outcome, session->Step(story[1].Request()));
  EXPECT_EQ(outcome.step, 1u);
  EXPECT_EQ(outcome.live, 2);
  EXPECT_EQ(session->counters().rejected_steps, 2);
  EXPECT_FALSE(session->degraded());
}

TEST_P(ClientSessionTest, ReattachAfterTheStreamBreaksContinuesTheSession) {
  const SessionConfig config = SmallConfig("window", 3);
  const auto story = MakeStory(config.shape, 0, 6);
  std::string id;
  {
    ASSERT_OK_AND_ASSIGN(auto session,
                         client_->CreateSession(config, Options()));
    id = session->id();
    for (int t = 0; t < 4; ++t) ASSERT_OK(session->Step(story[t].Request()));
  }  // The Session goes away without Close(): its stream is cancelled.

  std::unique_ptr<Session> again;
  const std::vector<uint64_t> held = {1001, 1002, 1003};
  for (int attempt = 0; attempt < 100 && again == nullptr; ++attempt) {
    auto attached = client_->Attach(id, Options(), held);
    if (attached.ok()) {
      again = *std::move(attached);
    } else {
      // The server may not have seen the old stream end yet.
      ASSERT_EQ(attached.status().code(), absl::StatusCode::kFailedPrecondition)
          << attached.status();
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->next_step(), 4u);
  ASSERT_OK_AND_ASSIGN(StepOutcome outcome, again->Step(story[4].Request()));
  EXPECT_EQ(outcome.step, 4u);
  EXPECT_THAT(outcome.evicted, ElementsAre(1001));
  EXPECT_THAT(again->LiveSlots(), ElementsAre(1002, 1003, 1004));
  EXPECT_STATUS_CODE(client_->Attach("no-such-session", Options()),
                     absl::StatusCode::kNotFound);
}

TEST_P(ClientSessionTest, ServerGoneMidSessionFallsBackWithinTheBudget) {
  SessionConfig config = SmallConfig("h2o", 5);
  config.streaming_sinks = 1;
  const auto story = MakeStory(config.shape, 0, 12);
  ASSERT_OK_AND_ASSIGN(auto session, client_->CreateSession(config, Options()));
  for (int t = 0; t < 6; ++t) ASSERT_OK(session->Step(story[t].Request()));
  const std::vector<uint64_t> before = session->LiveSlots();
  ASSERT_EQ(before.size(), 5u);

  server_->Shutdown(absl::ZeroDuration());
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(StepOutcome outcome, session->Step(story[6].Request()));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(outcome.fallback);
  EXPECT_TRUE(session->degraded());
  // Live: the five the server kept + 1006; streaming keeps the sink (the
  // first of the live set here is append index 0 only if h2o kept it) and
  // evicts the oldest other entry.
  std::vector<uint64_t> expected_live = before;
  expected_live.push_back(1006);
  const uint64_t oldest_non_sink =
      expected_live[0] == 1000 ? expected_live[1] : expected_live[0];
  EXPECT_THAT(outcome.evicted, ElementsAre(oldest_non_sink));
  EXPECT_EQ(outcome.live, 5);
  for (int t = 7; t < 12; ++t) {
    ASSERT_OK_AND_ASSIGN(StepOutcome local, session->Step(story[t].Request()));
    EXPECT_TRUE(local.fallback);
    EXPECT_EQ(local.live, 5);
    EXPECT_EQ(local.evicted.size(), 1u);
  }
  const SessionCounters counters = session->counters();
  EXPECT_EQ(counters.server_steps, 6);
  EXPECT_EQ(counters.fallback_steps, 6);
  EXPECT_EQ(counters.fallback_unavailable, 1);
  EXPECT_EQ(counters.fallback_degraded, 5);
  EXPECT_EQ(counters.evicted_by_fallback, 6);
}

INSTANTIATE_TEST_SUITE_P(BothStreamApis, ClientSessionTest,
                         testing::BothStreamApis(), testing::StreamApiName);

// --- A server that never answers a step: the deadline path, deterministic. --

class SessionFallbackTest : public ::testing::TestWithParam<StreamApi> {};

TEST_P(SessionFallbackTest, MissedDeadlineDecidesLocallyAndDegrades) {
  SilentService service;
  ClientOptions client_options;
  std::unique_ptr<grpc::Server> silent =
      Serve(&service, &client_options.target);
  ASSERT_NE(silent, nullptr);
  ASSERT_OK_AND_ASSIGN(auto client, Client::Connect(client_options));

  SessionConfig config = SmallConfig("entropy", 4);
  config.streaming_sinks = 1;
  SessionOptions options;
  options.stream_api = GetParam();
  options.step_deadline = absl::Milliseconds(50);
  ASSERT_OK_AND_ASSIGN(auto session, client->CreateSession(config, options));
  EXPECT_EQ(session->id(), "silent");
  const auto story = MakeStory(config.shape, 6, 3);

  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(StepOutcome prefill, session->Step(story[0].Request()));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(50));
  EXPECT_LT(waited, absl::Seconds(2));  // The engine does not stall.
  // Six entries, budget 4, one sink: 1001 and 1002 go.
  EXPECT_TRUE(prefill.fallback);
  EXPECT_THAT(prefill.evicted, ElementsAre(1001, 1002));
  EXPECT_EQ(prefill.live, 4);
  EXPECT_STATUS_CODE(session->degraded_reason(),
                     absl::StatusCode::kDeadlineExceeded);
  // Later steps do not wait at all.
  ASSERT_OK_AND_ASSIGN(StepOutcome next, session->Step(story[1].Request()));
  EXPECT_THAT(next.evicted, ElementsAre(1003));
  EXPECT_LT(next.latency, absl::Milliseconds(40));
  const SessionCounters counters = session->counters();
  EXPECT_EQ(counters.fallback_deadline, 1);
  EXPECT_EQ(counters.fallback_degraded, 1);
  EXPECT_EQ(counters.server_steps, 0);
  session.reset();
  silent->Shutdown(absl::ToChronoTime(absl::Now()));
}

TEST_P(SessionFallbackTest, PipelinedStepsFallBackOneStepLateToo) {
  SilentService service;
  ClientOptions client_options;
  std::unique_ptr<grpc::Server> silent =
      Serve(&service, &client_options.target);
  ASSERT_NE(silent, nullptr);
  ASSERT_OK_AND_ASSIGN(auto client, Client::Connect(client_options));
  SessionConfig config = SmallConfig("window", 3);
  config.streaming_sinks = 0;
  SessionOptions options;
  options.stream_api = GetParam();
  options.step_deadline = absl::Milliseconds(30);
  ASSERT_OK_AND_ASSIGN(auto session, client->CreateSession(config, options));
  const auto story = MakeStory(config.shape, 0, 6);

  std::vector<StepOutcome> late;
  for (const StoryStep& step : story) {
    ASSERT_OK_AND_ASSIGN(std::optional<StepOutcome> previous,
                         session->StepPipelined(step.Request()));
    if (previous.has_value()) late.push_back(*previous);
  }
  ASSERT_OK_AND_ASSIGN(std::optional<StepOutcome> last, session->Flush());
  ASSERT_TRUE(last.has_value());
  late.push_back(*last);
  ASSERT_EQ(late.size(), 6u);
  // Step t is decided when collected, after step t + 1 was appended: step 0
  // sees 2 live (budget 3), step 1 sees 3, step 2 sees 1000..1003 and evicts
  // 1000, step 3 evicts 1001, step 4 evicts 1002.
  EXPECT_THAT(late[0].evicted, IsEmpty());
  EXPECT_THAT(late[1].evicted, IsEmpty());
  for (size_t t = 2; t < 5; ++t) {
    EXPECT_THAT(late[t].evicted, ElementsAre(1000 + t - 2)) << "step " << t;
  }
  EXPECT_THAT(late[5].evicted, IsEmpty());  // Last: nothing new appended.
  EXPECT_THAT(session->LiveSlots(), ElementsAre(1003, 1004, 1005));
  const SessionCounters counters = session->counters();
  EXPECT_EQ(counters.fallback_deadline, 1);
  EXPECT_EQ(counters.fallback_degraded, 5);
  session.reset();
  silent->Shutdown(absl::ToChronoTime(absl::Now()));
}

INSTANTIATE_TEST_SUITE_P(BothStreamApis, SessionFallbackTest,
                         testing::BothStreamApis(), testing::StreamApiName);

TEST(OfflineSessionTest,
     UnreachableServerGivesALocalSessionThatKeepsTheBudget) {
  ClientOptions client_options;
  client_options.target =
      absl::StrCat("unix:/tmp/entrokv-client-test-absent-", getpid(), ".sock");
  client_options.rpc_deadline = absl::Seconds(2);
  ASSERT_OK_AND_ASSIGN(auto client, Client::Connect(client_options));
  SessionConfig config = SmallConfig("entropy", 8);
  config.streaming_sinks = 2;
  ASSERT_OK_AND_ASSIGN(auto session, client->CreateSession(config));
  EXPECT_TRUE(session->degraded());
  EXPECT_TRUE(session->id().empty());
  EXPECT_STATUS_CODE(session->degraded_reason(),
                     absl::StatusCode::kUnavailable);

  const auto story = MakeStory(config.shape, 0, 20);
  for (int t = 0; t < 20; ++t) {
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome,
                         session->Step(story[t].Request()));
    EXPECT_TRUE(outcome.fallback);
    EXPECT_EQ(outcome.live, std::min(t + 1, 8));
    // Live before step t >= 8: sinks 1000, 1001 and the newest six,
    // 1000 + t - 6 .. 1000 + t - 1; appending 1000 + t evicts 1000 + t - 6.
    if (t < 8) {
      EXPECT_THAT(outcome.evicted, IsEmpty());
    } else {
      EXPECT_THAT(outcome.evicted, ElementsAre(1000 + t - 6));
    }
  }
  const SessionCounters counters = session->counters();
  EXPECT_EQ(counters.steps, 20);
  EXPECT_EQ(counters.fallback_steps, 20);
  EXPECT_EQ(counters.fallback_unavailable, 20);
  EXPECT_EQ(counters.evicted_by_fallback, 12);
  EXPECT_EQ(counters.server_steps, 0);
  EXPECT_OK(session->Close());
  // The client sums its sessions' counters; a second session adds to them.
  ASSERT_OK_AND_ASSIGN(auto second, client->CreateSession(config));
  ASSERT_OK(second->Step(story[0].Request()));
  const SessionCounters totals = client->counters();
  EXPECT_EQ(totals.steps, 21);
  EXPECT_EQ(totals.fallback_unavailable, 21);
  EXPECT_EQ(totals.evicted_by_fallback, 12);

  SessionOptions strict;
  strict.offline_when_unavailable = false;
  EXPECT_STATUS_CODE(client->CreateSession(config, strict),
                     absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace entrokv
