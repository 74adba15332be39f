// Session lifecycle, attachment, batching, idle reclaim, echo and shutdown,
// through the real gRPC service running in process.

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

SessionConfig EntropyConfig(int64_t budget) {
  SessionConfig config;
  config.shape = SmallShape();
  config.budget = budget;
  config.placement = Placement::kCpu;
  return config;  // affinity + entropy: the project's policy.
}

// Polls `condition` for up to `timeout`.
template <typename Condition>
bool Eventually(Condition condition,
                absl::Duration timeout = absl::Seconds(5)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return condition();
}

class SessionLifecycleTest : public ServerTest {};

TEST_F(SessionLifecycleTest, CreateStepInspectListAndClose) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse created,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(5))));
  const std::string id = created.session_id();
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(created.session().config().budget(), 5);
  EXPECT_EQ(created.session().config().policy(), "window+fixed");
  EXPECT_EQ(created.session().stats().placement(), v1::PLACEMENT_CPU);
  EXPECT_EQ(created.session().stats().steps(), 0);

  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(id));
  WireStepSource source(SmallShape(), 3, id, /*prefill=*/4, /*first_slot=*/1);
  // Step 1 appends slots 1..4; steps 2.. append one slot each. A window of 5
  // keeps the newest 5: from step 3 on, each step evicts the oldest slot.
  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult first, stream.Step(source.Next()));
  EXPECT_EQ(first.live(), 4);
  EXPECT_TRUE(first.evicted().empty());
  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult second,
                       stream.Step(source.Next()));
  EXPECT_EQ(second.live(), 5);
  EXPECT_TRUE(second.evicted().empty());
  for (uint64_t oldest = 1; oldest <= 3; ++oldest) {
    ASSERT_OK_AND_ASSIGN(v1::SessionStepResult result,
                         stream.Step(source.Next()));
    EXPECT_THAT(result.evicted(), ElementsAreArray({oldest}));
    EXPECT_EQ(result.live(), 5);
    EXPECT_EQ(result.budget(), 5);
    EXPECT_GE(result.compute_ns(), 0);
  }

  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
  EXPECT_TRUE(info.attached());
  EXPECT_EQ(info.stats().steps(), 5);
  EXPECT_EQ(info.stats().last_step(), 5u);
  EXPECT_EQ(info.stats().live(), 5);
  // The peak counts what was held at once: 6 after a step's append, before
  // its eviction brought it back to 5.
  EXPECT_EQ(info.stats().peak_live(), 6);
  EXPECT_EQ(info.stats().appended(), 8);
  EXPECT_EQ(info.stats().evicted(), 3);
  // docs/step-semantics.md §9: live · (key bytes + 40).
  EXPECT_EQ(info.stats().bytes_held(), 5 * (2 * 2 * 16 * 2 + 40));

  ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse list,
                       ListSessions(stub_.get()));
  ASSERT_EQ(list.sessions_size(), 1);
  EXPECT_EQ(list.sessions(0).session_id(), id);
  EXPECT_EQ(list.server().sessions(), 1);
  EXPECT_EQ(list.server().bytes_held(), info.stats().bytes_held());

  EXPECT_OK(stream.Close());
  ASSERT_OK_AND_ASSIGN(info, GetSession(stub_.get(), id));
  EXPECT_FALSE(info.attached());

  ASSERT_OK_AND_ASSIGN(v1::SessionInfo closed, CloseSession(stub_.get(), id));
  EXPECT_EQ(closed.stats().steps(), 5);
  EXPECT_STATUS_CODE(GetSession(stub_.get(), id), absl::StatusCode::kNotFound);
  EXPECT_STATUS_CODE(CloseSession(stub_.get(), id),
                     absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(list, ListSessions(stub_.get()));
  EXPECT_EQ(list.sessions_size(), 0);
  EXPECT_EQ(list.server().bytes_held(), 0);
}

TEST_F(SessionLifecycleTest, MissingConfigGetsCoreDefaults) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), v1::SessionConfig()));
  const SessionConfig defaults;
  const v1::SessionConfig& config = created.session().config();
  EXPECT_EQ(config.budget(), defaults.budget);
  EXPECT_EQ(config.shape().head_dim(), defaults.shape.head_dim);
  EXPECT_EQ(config.shape().element_type(), v1::ELEMENT_TYPE_F16);
  EXPECT_EQ(config.ranking(), v1::RANKING_AFFINITY);
  EXPECT_EQ(config.budget_control(), v1::BUDGET_CONTROL_ENTROPY);
  EXPECT_EQ(config.streaming_sinks(), defaults.streaming_sinks);
  EXPECT_DOUBLE_EQ(config.affinity().lambda(), defaults.affinity.lambda);
  // auto → cpu on a server without a GPU.
  EXPECT_EQ(config.placement(), v1::PLACEMENT_CPU);
}

TEST_F(SessionLifecycleTest, PolicyNameSetsRankingAndControl) {
  StartServer();
  v1::SessionConfig config = ToWireConfig(WindowConfig(8));
  config.clear_ranking();
  config.clear_budget_control();
  config.set_policy("h2o+entropy");
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), config));
  EXPECT_EQ(created.session().config().ranking(), v1::RANKING_H2O);
  EXPECT_EQ(created.session().config().budget_control(),
            v1::BUDGET_CONTROL_ENTROPY);
  // The effective config round-trips.
  EXPECT_OK(CreateSession(stub_.get(), created.session().config()));
}

TEST_F(SessionLifecycleTest, ClientChosenIdAndGpuFallback) {
  StartServer();
  v1::SessionConfig config = ToWireConfig(WindowConfig(8));
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), config, "req-42"));
  EXPECT_EQ(created.session_id(), "req-42");
  config.set_placement(v1::PLACEMENT_GPU);
  config.set_placement_fallback(true);
  ASSERT_OK_AND_ASSIGN(created, CreateSession(stub_.get(), config));
  EXPECT_EQ(created.session().stats().placement(), v1::PLACEMENT_CPU);
  EXPECT_EQ(created.session().config().placement(), v1::PLACEMENT_CPU);
}

TEST_F(SessionLifecycleTest, SecondStreamCannotAttachAnOwnedSession) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse created,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(8))));
  const std::string id = created.session_id();
  DecodeStream owner(stub_.get());
  ASSERT_OK(owner.Attach(id));
  ASSERT_OK(owner.Attach(id));  // Attaching again on the owner: a no-op.
  DecodeStream intruder(stub_.get());
  const absl::Status status = intruder.Attach(id);
  EXPECT_STATUS_CODE(status, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("attach[0].session_id"));
  // A step for it on the intruder's stream fails on its own; the stream lives.
  WireStepSource source(SmallShape(), 3, id);
  const v1::SessionStep step = source.Next();
  EXPECT_STATUS_CODE(intruder.Step(step),
                     absl::StatusCode::kFailedPrecondition);
  EXPECT_OK(owner.Step(step));
  // Once the owner detaches, the intruder may take it.
  v1::DecodeRequest detach;
  detach.add_detach(id);
  ASSERT_OK_AND_ASSIGN(v1::DecodeResponse detached, owner.RoundTrip(detach));
  ASSERT_EQ(detached.detach_results_size(), 1);
  EXPECT_EQ(detached.detach_results(0).status().code(), 0);
  EXPECT_OK(intruder.Attach(id));
  EXPECT_OK(intruder.Step(source.Next()));
}

TEST_F(SessionLifecycleTest, BrokenStreamLeavesSessionResumable) {
  StartServer();
  const SessionConfig config = EntropyConfig(16);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> backend,
                       CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SessionState> reference,
                       backend->CreateSession(config, SessionLimits{}));
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), ToWireConfig(config)));
  const std::string id = created.session_id();
  WireStepSource source(config.shape, 5, id);
  auto run_steps = [&](DecodeStream& stream, int count) {
    for (int i = 0; i < count; ++i) {
      const v1::SessionStep step = source.Next();
      CoreStep core_step = ToCoreStep(step);
      StepResult expected;
      ASSERT_OK(reference->Step(core_step.input, &expected));
      ASSERT_OK_AND_ASSIGN(v1::SessionStepResult got, stream.Step(step));
      ASSERT_THAT(got.evicted(), ElementsAreArray(expected.evicted));
      ASSERT_EQ(got.live(), expected.live);
    }
  };
  {
    DecodeStream first(stub_.get());
    ASSERT_OK(first.Attach(id));
    run_steps(first, 30);
    first.Cancel();  // The engine's connection breaks mid-run.
  }
  // The server notices the broken stream and lets the session be attached.
  DecodeStream second(stub_.get());
  ASSERT_TRUE(Eventually([&] { return second.Attach(id).ok(); }));
  run_steps(second, 30);
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
  EXPECT_EQ(info.stats().steps(), 60);
}

TEST_F(SessionLifecycleTest,
       BrokenStreamOnItsOwnChannelLeavesSessionResumable) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse created,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(8))));
  const std::string id = created.session_id();
  WireStepSource source(SmallShape(), 5, id);
  {
    // A separate connection that goes away entirely (a crashed engine).
    auto channel = grpc::CreateChannel(server_->targets()[0],
                                       grpc::InsecureChannelCredentials());
    auto stub = v1::EntroKv::NewStub(channel);
    DecodeStream stream(stub.get());
    ASSERT_OK(stream.Attach(id));
    ASSERT_OK(stream.Step(source.Next()));
  }
  DecodeStream again(stub_.get());
  ASSERT_TRUE(Eventually([&] { return again.Attach(id).ok(); }));
  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult result, again.Step(source.Next()));
  EXPECT_EQ(result.step(), 2u);
}

// docs/step-semantics.md §9: a SmallShape() f16 entry holds 2·2·16 keys of
// 2 bytes plus 40 bytes of state.
constexpr int64_t kSmallF16EntryBytes = 2 * 2 * 16 * 2 + 40;

int64_t BytesHeld(v1::EntroKv::Stub* stub) {
  absl::StatusOr<v1::ListSessionsResponse> list = ListSessions(stub);
  return list.ok() ? list->server().bytes_held() : -1;
}

TEST_F(SessionLifecycleTest, IdleDetachedSessionsAreReclaimed) {
  ServerOptions options = TestServerOptions();
  const absl::Duration timeout = absl::Seconds(1);
  options.idle_timeout = timeout;
  options.reap_interval = absl::Milliseconds(20);
  StartServer(options);
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse idle,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(8))));
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse held,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(8))));
  // Both hold 4 entries, so that reclaiming them must free state.
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(idle.session_id()));
  ASSERT_OK(stream.Attach(held.session_id()));
  WireStepSource idle_source(SmallShape(), 1, idle.session_id(), 4);
  WireStepSource held_source(SmallShape(), 2, held.session_id(), 4);
  ASSERT_OK(stream.Step(idle_source.Next()));
  ASSERT_OK(stream.Step(held_source.Next()));
  EXPECT_EQ(BytesHeld(stub_.get()), 2 * 4 * kSmallF16EntryBytes);

  const absl::Time before_detach = absl::Now();
  v1::DecodeRequest detach;
  detach.add_detach(idle.session_id());
  ASSERT_OK_AND_ASSIGN(v1::DecodeResponse detached, stream.RoundTrip(detach));
  ASSERT_EQ(detached.detach_results_size(), 1);
  ASSERT_EQ(detached.detach_results(0).status().code(), 0);
  // Not yet: its idle clock started after `before_detach`, so an answer that
  // came back within the timeout of it must find the session. (On a machine
  // too slow for that, the check proves nothing and is skipped.)
  const absl::Status not_yet =
      GetSession(stub_.get(), idle.session_id()).status();
  if (absl::Now() - before_detach < timeout) {
    EXPECT_OK(not_yet);
  }
  EXPECT_TRUE(Eventually(
      [&] {
        return absl::IsNotFound(
            GetSession(stub_.get(), idle.session_id()).status());
      },
      absl::Seconds(20)));
  // Its state went with it; the attached one's stays.
  EXPECT_EQ(BytesHeld(stub_.get()), 4 * kSmallF16EntryBytes);
  // An attached session is never reclaimed, however long it is quiet: `held`
  // has been quiet for longer than the timeout already.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_OK(GetSession(stub_.get(), held.session_id()));
  EXPECT_EQ(server_->registry().size(), 1);
  // Detached, it goes too.
  EXPECT_OK(stream.Close());
  EXPECT_TRUE(Eventually(
      [&] {
        return absl::IsNotFound(
            GetSession(stub_.get(), held.session_id()).status());
      },
      absl::Seconds(20)));
  EXPECT_EQ(BytesHeld(stub_.get()), 0);
}

TEST_F(SessionLifecycleTest, ClosedWhileAttachedAnswersNotFound) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse created,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(8))));
  const std::string id = created.session_id();
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(id));
  WireStepSource source(SmallShape(), 5, id);
  ASSERT_OK(stream.Step(source.Next()));
  ASSERT_OK(CloseSession(stub_.get(), id));
  const absl::StatusOr<v1::SessionStepResult> result =
      stream.Step(source.Next());
  EXPECT_STATUS_CODE(result, absl::StatusCode::kNotFound);
  EXPECT_THAT(result.status().message(), HasSubstr("steps[0].session_id"));
  // The stream itself is fine.
  EXPECT_OK(stream.Close());
}

// CloseSession frees the state even while a stream holds the session: the
// stream lets go of it at the next message it handles.
TEST_F(SessionLifecycleTest, ClosingAHeldSessionFreesItsStateAtNextMessage) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse created,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(8))));
  const std::string id = created.session_id();
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(id));
  WireStepSource source(SmallShape(), 5, id, /*prefill=*/6);
  ASSERT_OK(stream.Step(source.Next()));
  EXPECT_EQ(BytesHeld(stub_.get()), 6 * kSmallF16EntryBytes);
  ASSERT_OK(CloseSession(stub_.get(), id));
  ASSERT_OK(stream.RoundTrip(v1::DecodeRequest()));  // Any message.
  EXPECT_EQ(BytesHeld(stub_.get()), 0);
  // The stream no longer knows the session.
  const absl::StatusOr<v1::SessionStepResult> result =
      stream.Step(source.Next());
  EXPECT_STATUS_CODE(result, absl::StatusCode::kNotFound);
  EXPECT_OK(stream.Close());
}

// An engine that runs each request as create → attach + prefill → close on one
// long-lived stream holds one request's state at a time, not all of them.
TEST_F(SessionLifecycleTest,
       CreateAttachCloseLoopOnOneStreamDoesNotAccumulate) {
  ServerOptions options = TestServerOptions();
  constexpr int kPrefill = 16;
  options.max_bytes = 2 * kPrefill * kSmallF16EntryBytes;  // Two requests.
  options.max_sessions = 2;
  StartServer(options);
  DecodeStream stream(stub_.get());
  for (int i = 0; i < 20; ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i));
    ASSERT_OK_AND_ASSIGN(
        v1::CreateSessionResponse created,
        CreateSession(stub_.get(), ToWireConfig(WindowConfig(kPrefill))));
    WireStepSource source(SmallShape(), 10 + i, created.session_id(), kPrefill);
    v1::DecodeRequest request;
    request.add_attach(created.session_id());
    *request.add_steps() = source.Next();
    ASSERT_OK_AND_ASSIGN(v1::DecodeResponse response,
                         stream.RoundTrip(request));
    ASSERT_EQ(response.attach_results(0).status().code(), 0);
    ASSERT_EQ(response.results(0).status().code(), 0)
        << response.results(0).status().message();
    EXPECT_EQ(response.results(0).live(), kPrefill);
    ASSERT_OK(CloseSession(stub_.get(), created.session_id()));
  }
  ASSERT_OK(stream.RoundTrip(v1::DecodeRequest()));
  EXPECT_EQ(BytesHeld(stub_.get()), 0);
  EXPECT_OK(stream.Close());
}

TEST_F(SessionLifecycleTest, DetachAnswersByWhatTheSessionIs) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse mine,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(8))));
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse elsewhere,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(8))));
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(mine.session_id()));
  v1::DecodeRequest request;
  request.add_detach("no-such-session");
  request.add_detach(elsewhere.session_id());  // Open, not held here.
  request.add_detach("");
  request.add_detach(mine.session_id());
  ASSERT_OK_AND_ASSIGN(v1::DecodeResponse response, stream.RoundTrip(request));
  ASSERT_EQ(response.detach_results_size(), 4);
  const absl::Status unknown = ToAbsl(response.detach_results(0).status());
  EXPECT_STATUS_CODE(unknown, absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("detach[0].session_id"));
  const absl::Status not_held = ToAbsl(response.detach_results(1).status());
  EXPECT_STATUS_CODE(not_held, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(not_held.message(), HasSubstr("detach[1].session_id"));
  const absl::Status empty = ToAbsl(response.detach_results(2).status());
  EXPECT_STATUS_CODE(empty, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr("detach[2].session_id"));
  EXPECT_EQ(response.detach_results(3).status().code(), 0);
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info,
                       GetSession(stub_.get(), mine.session_id()));
  EXPECT_FALSE(info.attached());
}

// One message carries the steps of several sessions; each is answered and
// fails on its own.
TEST_F(SessionLifecycleTest, BatchOfSessionsInOneMessage) {
  StartServer();
  constexpr int kSessions = 6;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> backend,
                       CreateBackend(BackendKind::kCpu));
  std::vector<std::string> ids;
  std::vector<std::unique_ptr<SessionState>> references;
  std::vector<std::unique_ptr<WireStepSource>> sources;
  v1::DecodeRequest attach;
  for (int s = 0; s < kSessions; ++s) {
    const SessionConfig config = EntropyConfig(10 + s);
    ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                         CreateSession(stub_.get(), ToWireConfig(config)));
    ids.push_back(created.session_id());
    ASSERT_OK_AND_ASSIGN(auto reference,
                         backend->CreateSession(config, SessionLimits{}));
    references.push_back(std::move(reference));
    sources.push_back(
        std::make_unique<WireStepSource>(config.shape, 100 + s, ids.back()));
    attach.add_attach(ids.back());
  }
  DecodeStream stream(stub_.get());
  ASSERT_OK_AND_ASSIGN(v1::DecodeResponse attached, stream.RoundTrip(attach));
  ASSERT_EQ(attached.attach_results_size(), kSessions);
  for (const auto& result : attached.attach_results()) {
    EXPECT_EQ(result.status().code(), 0) << result.status().message();
  }
  for (int t = 0; t < 40; ++t) {
    SCOPED_TRACE(absl::StrCat("message ", t));
    v1::DecodeRequest request;
    std::vector<StepResult> expected(kSessions);
    for (int s = 0; s < kSessions; ++s) {
      const v1::SessionStep step = sources[s]->Next();
      CoreStep core_step = ToCoreStep(step);
      ASSERT_OK(references[s]->Step(core_step.input, &expected[s]));
      *request.add_steps() = step;
    }
    // On every third message one session's queries are cut short: that step
    // alone fails, and the corrected step is then sent on its own.
    const bool corrupt = t % 3 == 0;
    const int bad = t % kSessions;
    const v1::SessionStep good_copy = request.steps(bad);
    if (corrupt) request.mutable_steps(bad)->mutable_queries()->pop_back();
    ASSERT_OK_AND_ASSIGN(v1::DecodeResponse response,
                         stream.RoundTrip(request));
    ASSERT_EQ(response.results_size(), kSessions);
    for (int s = 0; s < kSessions; ++s) {
      v1::SessionStepResult got = response.results(s);
      EXPECT_EQ(got.session_id(), ids[s]);
      if (corrupt && s == bad) {
        EXPECT_EQ(got.status().code(), grpc::StatusCode::INVALID_ARGUMENT);
        EXPECT_THAT(got.status().message(),
                    HasSubstr(absl::StrCat("steps[", s, "].queries")));
        EXPECT_TRUE(got.evicted().empty());
        ASSERT_OK_AND_ASSIGN(got, stream.Step(good_copy));
      }
      ASSERT_EQ(got.status().code(), 0) << got.status().message();
      EXPECT_THAT(got.evicted(), ElementsAreArray(expected[s].evicted));
      EXPECT_EQ(got.live(), expected[s].live);
      EXPECT_EQ(got.budget(), expected[s].budget);
    }
  }
}

// ---------------------------------------------------------------------------
// Server::Start with addresses it cannot use.

absl::Status StartStatus(const std::vector<std::string>& listen,
                         bool allow_insecure_tcp = false) {
  ServerOptions options = TestServerOptions();
  options.listen = listen;
  options.allow_insecure_tcp = allow_insecure_tcp;
  return Server::Start(options).status();
}

TEST(ServerStartTest, UnbindableAddressIsAnErrorNotACrash) {
  // TEST-NET-1 (RFC 5737): numeric, so no resolver is asked, and on no local
  // interface, so binding fails. (Plaintext off loopback must be allowed
  // first, or the start is refused before any bind.)
  const absl::Status status =
      StartStatus({"192.0.2.1:1"}, /*allow_insecure_tcp=*/true);
  EXPECT_STATUS_CODE(status, absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("listen"));
  EXPECT_THAT(status.message(), HasSubstr("192.0.2.1:1"));
  EXPECT_THAT(status.message(), HasSubstr("EADDRNOTAVAIL"));
}

TEST(ServerStartTest, PortInUseIsAnErrorNotACrash) {
  ServerOptions options = TestServerOptions();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Server> first, Server::Start(options));
  const std::string taken = first->targets()[0];
  const absl::Status status = StartStatus({taken});
  EXPECT_STATUS_CODE(status, absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("listen"));
  // The first server is unharmed.
  auto channel = grpc::CreateChannel(taken, grpc::InsecureChannelCredentials());
  auto stub = v1::EntroKv::NewStub(channel);
  EXPECT_OK(ListSessions(stub.get()));
}

TEST(ServerStartTest, RejectsPortsOutsideTheTcpRangeAndEmptyUnixPaths) {
  for (const char* address :
       {"127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:-1",
        "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:80x", "127.0.0.1", "[::1]",
        "unix:", "unix-abstract:"}) {
    SCOPED_TRACE(address);
    const absl::Status status = StartStatus({address});
    EXPECT_STATUS_CODE(status, absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("listen"));
  }
  // The edges of the range are fine (65535 may be taken; it must not be
  // rejected as invalid).
  EXPECT_OK(StartStatus({"127.0.0.1:0"}));
  EXPECT_NE(StartStatus({"127.0.0.1:65535"}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace entrokv::server::testing
