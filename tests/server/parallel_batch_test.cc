// A DecodeRequest's steps run in parallel over its sessions (StepPool): the
// answers equal core's in-process decisions, come back in request order, a
// session's own steps stay in order, and one session's failing step leaves
// the rest of the batch as it would be alone.

#include <memory>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::testing::ElementsAreArray;

class ParallelBatchTest : public ServerTest {
 protected:
  // One session: its wire source and its in-process reference.
  struct Lane {
    std::string id;
    std::unique_ptr<WireStepSource> source;
    std::unique_ptr<SessionState> reference;
  };

  void RunBatches(int workers) {
    ServerOptions options = TestServerOptions();
    options.step_workers = workers;
    StartServer(options);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> backend,
                         CreateBackend(BackendKind::kCpu));
    const std::vector<std::pair<Ranking, BudgetControl>> policies =
        AllPolicies();
    constexpr int kSessions = 12;
    std::vector<Lane> lanes(kSessions);
    DecodeStream stream(stub_.get());
    for (int s = 0; s < kSessions; ++s) {
      SessionConfig config;
      config.shape = SmallShape();
      config.budget = 10 + s;
      std::tie(config.ranking, config.budget_control) =
          policies[(3 * s) % policies.size()];
      config.placement = Placement::kCpu;
      ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                           CreateSession(stub_.get(), ToWireConfig(config)));
      lanes[s].id = created.session_id();
      lanes[s].source = std::make_unique<WireStepSource>(
          config.shape, /*seed=*/100 + s, lanes[s].id, /*prefill=*/8);
      ASSERT_OK_AND_ASSIGN(lanes[s].reference,
                           backend->CreateSession(config, SessionLimits{}));
      ASSERT_OK(stream.Attach(lanes[s].id));
    }
    int64_t evicted = 0;
    for (int round = 0; round < 30; ++round) {
      SCOPED_TRACE(absl::StrCat("round ", round));
      // Every session once, sessions 0 and 5 twice (their steps in order,
      // interleaved with the others'), and in round 7 session 3's first step
      // sent with a step number one too high: refused, as it would be alone,
      // and its second step then runs as the real next step.
      v1::DecodeRequest request;
      std::vector<int> lane_of;
      std::vector<bool> bad;
      for (int s = 0; s < kSessions; ++s) {
        *request.add_steps() = lanes[s].source->Next();
        lane_of.push_back(s);
        bad.push_back(false);
      }
      for (int s : {0, 5}) {
        *request.add_steps() = lanes[s].source->Next();
        lane_of.push_back(s);
        bad.push_back(false);
      }
      if (round == 7) {
        v1::SessionStep wrong = request.steps(3);
        wrong.set_step(wrong.step() + 1);
        *request.add_steps() = request.steps(3);
        *request.mutable_steps(3) = wrong;
        lane_of.push_back(3);
        bad[3] = true;
        bad.push_back(false);
      }
      ASSERT_OK_AND_ASSIGN(v1::DecodeResponse response,
                           stream.RoundTrip(request));
      ASSERT_EQ(response.results_size(), request.steps_size());
      for (int i = 0; i < request.steps_size(); ++i) {
        const v1::SessionStepResult& got = response.results(i);
        EXPECT_EQ(got.session_id(), request.steps(i).session_id()) << i;
        EXPECT_EQ(got.step(), request.steps(i).step()) << i;
        if (bad[i]) {
          EXPECT_EQ(got.status().code(),
                    static_cast<int>(absl::StatusCode::kFailedPrecondition))
              << i;
          continue;
        }
        ASSERT_EQ(got.status().code(), 0) << i << ": " << got.status().message();
        CoreStep core = ToCoreStep(request.steps(i));
        StepResult want;
        ASSERT_OK(lanes[lane_of[i]].reference->Step(core.input, &want));
        ASSERT_THAT(got.evicted(), ElementsAreArray(want.evicted)) << i;
        ASSERT_EQ(got.live(), want.live) << i;
        ASSERT_EQ(got.budget(), want.budget) << i;
        evicted += got.evicted_size();
      }
    }
    EXPECT_GT(evicted, 0);
  }
};

TEST_F(ParallelBatchTest, FourWorkersAnswerAsCoreInRequestOrder) {
  RunBatches(4);
}

TEST_F(ParallelBatchTest, OneWorkerAnswersTheSame) { RunBatches(1); }

// A session stepped and detached in one message, then closed, gives its bytes
// back at once: the stream, idle after that message, holds nothing of it.
TEST_F(ParallelBatchTest, ADetachedSessionIsFreedWithoutAnotherMessage) {
  ServerOptions options = TestServerOptions();
  options.step_workers = 2;
  const SessionConfig config = WindowConfig(/*budget=*/64);
  // 16 entries of 2 layers x 2 kv heads x 16 f16 + 40 bytes of state: room
  // for one session's 16 entries, not for two.
  options.max_bytes = 24 * (2 * 2 * 16 * 2 + 40);
  StartServer(options);
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse a,
                       CreateSession(stub_.get(), ToWireConfig(config)));
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(a.session_id()));
  WireStepSource source_a(config.shape, 1, a.session_id(), /*prefill=*/16);
  v1::DecodeRequest request;
  *request.add_steps() = source_a.Next();
  request.add_detach(a.session_id());
  ASSERT_OK_AND_ASSIGN(v1::DecodeResponse response, stream.RoundTrip(request));
  ASSERT_EQ(response.results(0).status().code(), 0);
  ASSERT_OK(CloseSession(stub_.get(), a.session_id()).status());

  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse b,
                       CreateSession(stub_.get(), ToWireConfig(config)));
  DecodeStream other(stub_.get());
  ASSERT_OK(other.Attach(b.session_id()));
  WireStepSource source_b(config.shape, 2, b.session_id(), /*prefill=*/16);
  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult got,
                       other.Step(source_b.Next()));
  EXPECT_EQ(got.status().code(), 0) << got.status().message();
  EXPECT_EQ(got.live(), 16);
}

}  // namespace
}  // namespace entrokv::server::testing
