// A DecodeRequest's steps run in parallel over its sessions (StepPool): the
// answers equal core's in-process decisions, come back in request order, a
// session's own steps stay in order, and one session's failing step leaves
// the rest of the batch as it would be alone.

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

  // `count` sessions of assorted policies, attached to `stream`, each with
  // its in-process reference.
  void MakeLanes(int count, DecodeStream* stream, std::vector<Lane>* lanes) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> backend,
                         CreateBackend(BackendKind::kCpu));
    const std::vector<std::pair<Ranking, BudgetControl>> policies =
        AllPolicies();
    lanes->resize(count);
    for (int s = 0; s < count; ++s) {
      SessionConfig config;
      config.shape = SmallShape();
      config.budget = 10 + s;
      std::tie(config.ranking, config.budget_control) =
          policies[(3 * s) % policies.size()];
      config.placement = Placement::kCpu;
      ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                           CreateSession(stub_.get(), ToWireConfig(config)));
      Lane& lane = (*lanes)[s];
      lane.id = created.session_id();
      lane.source = std::make_unique<WireStepSource>(
          config.shape, /*seed=*/100 + s, lane.id, /*prefill=*/8);
      ASSERT_OK_AND_ASSIGN(lane.reference,
                           backend->CreateSession(config, SessionLimits{}));
      ASSERT_OK(stream->Attach(lane.id));
    }
  }

  // Each session's next step, in one message.
  static v1::DecodeRequest NextOfEach(std::vector<Lane>& lanes) {
    v1::DecodeRequest request;
    for (Lane& lane : lanes) *request.add_steps() = lane.source->Next();
    return request;
  }

  // `response` answers `request` (step i of lanes[i]) as core does.
  static void ExpectAsCore(const v1::DecodeRequest& request,
                           const v1::DecodeResponse& response,
                           std::vector<Lane>& lanes) {
    ASSERT_EQ(response.results_size(), request.steps_size());
    for (int i = 0; i < request.steps_size(); ++i) {
      const v1::SessionStepResult& got = response.results(i);
      ASSERT_EQ(got.session_id(), request.steps(i).session_id()) << i;
      ASSERT_EQ(got.step(), request.steps(i).step()) << i;
      ASSERT_EQ(got.status().code(), 0) << i << ": " << got.status().message();
      CoreStep core = ToCoreStep(request.steps(i));
      StepResult want;
      ASSERT_OK(lanes[i].reference->Step(core.input, &want));
      ASSERT_THAT(got.evicted(), ElementsAreArray(want.evicted)) << i;
      ASSERT_EQ(got.live(), want.live) << i;
    }
  }

  void StartServerWithWorkers(int workers) {
    ServerOptions options = TestServerOptions();
    options.step_workers = workers;
    StartServer(options);
  }

  void RunBatches(int workers) {
    StartServerWithWorkers(workers);
    constexpr int kSessions = 12;
    std::vector<Lane> lanes;
    DecodeStream stream(stub_.get());
    ASSERT_NO_FATAL_FAILURE(MakeLanes(kSessions, &stream, &lanes));
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

// In one message, a failed step leaves its session unchanged: that session's
// next step (after its first) finds a step missing, the other sessions are
// answered as core decides, and the failed step resent (corrected) then runs as
// the real one.
TEST_F(ParallelBatchTest, AFailedStepMakesTheSessionsNextStepFindAStepMissing) {
  StartServerWithWorkers(2);
  std::vector<Lane> lanes;
  DecodeStream stream(stub_.get());
  ASSERT_NO_FATAL_FAILURE(MakeLanes(2, &stream, &lanes));
  // A first step may carry any number: the rule needs one accepted step.
  const v1::DecodeRequest first = NextOfEach(lanes);
  ASSERT_OK_AND_ASSIGN(v1::DecodeResponse answered, stream.RoundTrip(first));
  ASSERT_NO_FATAL_FAILURE(ExpectAsCore(first, answered, lanes));
  const v1::SessionStep a = lanes[0].source->Next();
  const v1::SessionStep a_next = lanes[0].source->Next();
  const v1::SessionStep b = lanes[1].source->Next();
  v1::DecodeRequest request;
  *request.add_steps() = a;
  request.mutable_steps(0)->mutable_append()->set_keys("x");  // Wrong size.
  *request.add_steps() = a_next;
  *request.add_steps() = b;
  ASSERT_OK_AND_ASSIGN(v1::DecodeResponse response, stream.RoundTrip(request));
  ASSERT_EQ(response.results_size(), 3);
  EXPECT_EQ(response.results(0).status().code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(response.results(0).status().message(),
              ::testing::StartsWith("steps[0].append.keys"));
  EXPECT_EQ(response.results(1).status().code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(response.results(1).status().message(),
              ::testing::StartsWith("steps[1].step"));
  EXPECT_THAT(response.results(1).status().message(),
              ::testing::HasSubstr("a step is missing"));
  ASSERT_EQ(response.results(2).status().code(), 0);
  CoreStep core = ToCoreStep(b);
  StepResult want;
  ASSERT_OK(lanes[1].reference->Step(core.input, &want));
  EXPECT_THAT(response.results(2).evicted(), ElementsAreArray(want.evicted));

  v1::DecodeRequest again;
  *again.add_steps() = a;
  ASSERT_OK_AND_ASSIGN(response, stream.RoundTrip(again));
  std::vector<Lane> only_a;
  only_a.push_back(std::move(lanes[0]));
  ASSERT_NO_FATAL_FAILURE(ExpectAsCore(again, response, only_a));
}

// Steps of a session closed while the stream holds it, several in one
// message: each is answered NOT_FOUND, and the message's other session is
// answered as core decides.
TEST_F(ParallelBatchTest, EveryStepOfAClosedSessionIsNotFound) {
  StartServerWithWorkers(2);
  std::vector<Lane> lanes;
  DecodeStream stream(stub_.get());
  ASSERT_NO_FATAL_FAILURE(MakeLanes(2, &stream, &lanes));
  ASSERT_OK(CloseSession(stub_.get(), lanes[1].id).status());
  v1::DecodeRequest request;
  *request.add_steps() = lanes[1].source->Next();
  *request.add_steps() = lanes[0].source->Next();
  *request.add_steps() = lanes[1].source->Next();
  ASSERT_OK_AND_ASSIGN(v1::DecodeResponse response, stream.RoundTrip(request));
  ASSERT_EQ(response.results_size(), 3);
  for (int i : {0, 2}) {
    EXPECT_EQ(response.results(i).status().code(),
              static_cast<int>(absl::StatusCode::kNotFound))
        << i;
    EXPECT_THAT(
        response.results(i).status().message(),
        ::testing::StartsWith(absl::StrCat("steps[", i, "].session_id")));
  }
  ASSERT_EQ(response.results(1).status().code(), 0)
      << response.results(1).status().message();
  CoreStep core = ToCoreStep(request.steps(1));
  StepResult want;
  ASSERT_OK(lanes[0].reference->Step(core.input, &want));
  EXPECT_THAT(response.results(1).evicted(), ElementsAreArray(want.evicted));
}

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

// Three messages sent before any answer is read (as a pipelining engine
// sends them) are each answered in order, as core decides.
TEST_F(ParallelBatchTest, MessagesSentAheadAreAnsweredInOrder) {
  StartServerWithWorkers(2);
  std::vector<Lane> lanes;
  DecodeStream stream(stub_.get());
  ASSERT_NO_FATAL_FAILURE(MakeLanes(24, &stream, &lanes));
  for (int round = 0; round < 10; ++round) {
    std::vector<v1::DecodeRequest> sent;
    for (int m = 0; m < 3; ++m) {
      sent.push_back(NextOfEach(lanes));
      ASSERT_TRUE(stream.Write(sent.back()));
    }
    for (const v1::DecodeRequest& request : sent) {
      v1::DecodeResponse response;
      ASSERT_TRUE(stream.Read(&response));
      ASSERT_NO_FATAL_FAILURE(ExpectAsCore(request, response, lanes));
    }
  }
  EXPECT_OK(stream.Close());
}

// A client that half-closes right after sending a batch still gets the
// answer, and then the stream's OK end.
TEST_F(ParallelBatchTest, AHalfCloseAfterABatchStillGetsItsAnswer) {
  StartServerWithWorkers(2);
  std::vector<Lane> lanes;
  DecodeStream stream(stub_.get());
  ASSERT_NO_FATAL_FAILURE(MakeLanes(32, &stream, &lanes));
  const v1::DecodeRequest request = NextOfEach(lanes);
  ASSERT_TRUE(stream.Write(request));
  ASSERT_TRUE(stream.WritesDone());
  v1::DecodeResponse response;
  ASSERT_TRUE(stream.Read(&response));
  ASSERT_NO_FATAL_FAILURE(ExpectAsCore(request, response, lanes));
  EXPECT_FALSE(stream.Read(&response));
  EXPECT_OK(stream.Finish());
}

// A client that goes away with batches in flight: the server lets its
// sessions go once their steps are done, and goes on serving.
TEST_F(ParallelBatchTest, ACancelWithBatchesInFlightReleasesItsSessions) {
  StartServerWithWorkers(2);
  std::vector<Lane> lanes;
  {
    DecodeStream stream(stub_.get());
    ASSERT_NO_FATAL_FAILURE(MakeLanes(32, &stream, &lanes));
    for (int m = 0; m < 3; ++m) ASSERT_TRUE(stream.Write(NextOfEach(lanes)));
    stream.Cancel();
  }
  // The sessions are released once the cancelled stream's handler is gone.
  DecodeStream next(stub_.get());
  absl::Status attached;
  for (int attempt = 0; attempt < 500; ++attempt) {
    attached = next.Attach(lanes[0].id);
    if (attached.ok()) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_OK(attached);
}

}  // namespace
}  // namespace entrokv::server::testing
