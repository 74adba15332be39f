// Fail-open at creation and close: CreateSession, its attach and Close() are
// bounded by SessionOptions::create_deadline, and every server-side failure
// (unreachable, silent, at a limit, a failed attach) gives an offline
// session or a local close, while the caller's own errors are still returned.
// Against the real server in process, a listening socket that never accepts,
// and a service that never answers.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client_test_util.h"
#include "entrokv/client/batch.h"
#include "entrokv/client/client.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "fake_servers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::MakeStory;
using ::entrokv::testing::Serve;
using ::entrokv::testing::SmallConfig;
using ::entrokv::testing::StartTestServer;
using ::entrokv::testing::TestServerOptions;

// Slack for scheduling on a shared machine, on top of a deadline.
constexpr absl::Duration kMargin = absl::Milliseconds(400);

// A TCP port on 127.0.0.1 that completes the handshake (the kernel queues the
// connection) and never answers: nothing accepts it.
class BlackholePort {
 public:
  BlackholePort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(fd_, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
              0);
    EXPECT_EQ(listen(fd_, 64), 0);
    socklen_t length = sizeof(address);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length),
              0);
    port_ = ntohs(address.sin_port);
  }
  ~BlackholePort() { close(fd_); }
  BlackholePort(const BlackholePort&) = delete;
  BlackholePort& operator=(const BlackholePort&) = delete;

  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Answers CreateSession and the attach handshake; CloseSession (and, with
// `hang_create`, CreateSession) never answers until the call is cancelled.
class HangingService final : public v1::EntroKv::Service {
 public:
  explicit HangingService(bool hang_create) : hang_create_(hang_create) {}

  grpc::Status CreateSession(grpc::ServerContext* context,
                             const v1::CreateSessionRequest*,
                             v1::CreateSessionResponse* response) override {
    if (hang_create_) return Hang(context);
    response->set_session_id("hanging");
    return grpc::Status::OK;
  }
  grpc::Status CloseSession(grpc::ServerContext* context,
                            const v1::CloseSessionRequest*,
                            v1::CloseSessionResponse*) override {
    ++close_calls_;
    return Hang(context);
  }
  grpc::Status Decode(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream)
      override {
    testing::AnswerAttachesOnly(stream);
    return grpc::Status::OK;
  }

  int close_calls() const { return close_calls_; }

 private:
  static grpc::Status Hang(grpc::ServerContext* context) {
    while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }

  const bool hang_create_;
  std::atomic<int> close_calls_{0};
};

std::unique_ptr<Client> Connect(const std::string& target) {
  ClientOptions options;
  options.target = target;
  auto client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// Steps `session` through a short story; every step must be decided locally
// within the budget.
void ExpectLocalStepsWithinBudget(Session* session, int64_t budget) {
  const auto story = MakeStory(session->config().shape, 0, 12);
  for (const auto& step : story) {
    absl::StatusOr<StepOutcome> outcome = session->Step(step.Request());
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_TRUE(outcome->fallback);
    EXPECT_LE(outcome->live, budget);
  }
}

TEST(FailOpenTest, BlackholePortGivesAnOfflineSessionWithinTheDeadline) {
  BlackholePort blackhole;
  auto client = Connect(blackhole.target());
  ASSERT_NE(client, nullptr);
  const SessionConfig config = SmallConfig("entropy", 6);
  SessionOptions options;  // The default creation deadline.
  const absl::Duration bound = options.create_deadline + kMargin;

  absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(auto session, client->CreateSession(config, options));
  EXPECT_LT(absl::Now() - start, bound);
  EXPECT_TRUE(session->degraded());
  EXPECT_TRUE(session->id().empty());
  EXPECT_STATUS_CODE(session->degraded_reason(),
                     absl::StatusCode::kDeadlineExceeded);
  ExpectLocalStepsWithinBudget(session.get(), config.budget);
  start = absl::Now();
  EXPECT_OK(session->Close());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(50));  // Nothing to close.
  EXPECT_EQ(client->counters().offline_sessions, 1);

  // A settable deadline: a longer one is waited for in full.
  options.create_deadline = absl::Milliseconds(600);
  start = absl::Now();
  ASSERT_OK_AND_ASSIGN(session, client->CreateSession(config, options));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(550));
  EXPECT_LT(waited, options.create_deadline + kMargin);
  EXPECT_TRUE(session->degraded());

  // A DecodeBatch opens its stream without waiting for the server, and its
  // sessions fail open the same way.
  start = absl::Now();
  std::unique_ptr<DecodeBatch> batch = client->CreateBatch(StreamApi::kSync);
  ASSERT_OK_AND_ASSIGN(auto batched, batch->CreateSession(config));
  EXPECT_LT(absl::Now() - start, bound);
  EXPECT_TRUE(batched->degraded());
  EXPECT_EQ(client->counters().offline_sessions, 3);
}

// An outage is written to ClientOptions::log, not only counted, and a
// thousand sessions created offline write one line, not a thousand.
TEST(FailOpenTest, OfflineCreationIsLoggedOncePerPeriodWithWhatItMeans) {
  ClientOptions options;
  options.target = absl::StrCat("unix:", ::testing::TempDir(),
                                "/entrokv-no-such-socket");
  absl::Mutex mu;
  std::vector<std::string> lines;
  options.log = [&](std::string_view line) {
    absl::MutexLock lock(&mu);
    lines.emplace_back(line);
  };
  ASSERT_OK_AND_ASSIGN(auto client, Client::Connect(options));
  const SessionConfig config = SmallConfig("window", 4);
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(auto session, client->CreateSession(config));
    EXPECT_TRUE(session->degraded());
    EXPECT_TRUE(session->id().empty());
  }
  EXPECT_EQ(client->counters().offline_sessions, 3);
  absl::MutexLock lock(&mu);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], ::testing::HasSubstr("created offline"));
  EXPECT_THAT(lines[0], ::testing::HasSubstr("UNAVAILABLE"));
  EXPECT_THAT(lines[0], ::testing::HasSubstr("no live_keys"));
}

TEST(FailOpenTest, SilentCreateGivesAnOfflineSessionWithinTheDeadline) {
  HangingService service(/*hang_create=*/true);
  std::string target;
  auto server = Serve(&service, &target);
  ASSERT_NE(server, nullptr);
  auto client = Connect(target);
  ASSERT_NE(client, nullptr);
  SessionOptions options;
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(auto session,
                       client->CreateSession(SmallConfig("tova", 4), options));
  EXPECT_LT(absl::Now() - start, options.create_deadline + kMargin);
  EXPECT_TRUE(session->degraded());
  EXPECT_STATUS_CODE(session->degraded_reason(),
                     absl::StatusCode::kDeadlineExceeded);
  session.reset();
  server->Shutdown(absl::ToChronoTime(absl::Now()));
}

TEST(FailOpenTest, SessionLimitGivesAnOfflineSessionThatSaysWhy) {
  server::ServerOptions server_options = TestServerOptions();
  server_options.max_sessions = 1;
  auto server = StartTestServer(server_options);
  ASSERT_NE(server, nullptr);
  auto client = Connect(server->targets()[0]);
  ASSERT_NE(client, nullptr);
  const SessionConfig config = SmallConfig("h2o", 5);

  ASSERT_OK_AND_ASSIGN(auto first, client->CreateSession(config));
  EXPECT_FALSE(first->degraded());
  ASSERT_OK_AND_ASSIGN(auto second, client->CreateSession(config));
  EXPECT_TRUE(second->degraded());
  EXPECT_TRUE(second->id().empty());
  EXPECT_STATUS_CODE(second->degraded_reason(),
                     absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(second->degraded_reason().message()),
              ::testing::HasSubstr("sessions"));
  EXPECT_EQ(second->counters().offline_sessions, 1);
  EXPECT_EQ(client->counters().offline_sessions, 1);
  ExpectLocalStepsWithinBudget(second.get(), config.budget);
  EXPECT_OK(second->Close());

  // A strict caller still gets the status.
  SessionOptions strict;
  strict.offline_when_unavailable = false;
  EXPECT_STATUS_CODE(client->CreateSession(config, strict),
                     absl::StatusCode::kResourceExhausted);
  EXPECT_OK(first->Close());
}

TEST(FailOpenTest, CallerErrorsAreStillReturned) {
  auto server = StartTestServer();
  ASSERT_NE(server, nullptr);
  auto client = Connect(server->targets()[0]);
  ASSERT_NE(client, nullptr);
  const SessionConfig config = SmallConfig("window", 4);
  // Checked by the server: a session id with a space.
  EXPECT_STATUS_CODE(client->CreateSession(config, {}, "has space"),
                     absl::StatusCode::kInvalidArgument);
  // Checked by the client: a budget below 1.
  SessionConfig bad = config;
  bad.budget = 0;
  EXPECT_STATUS_CODE(client->CreateSession(bad),
                     absl::StatusCode::kInvalidArgument);
  // A taken id.
  ASSERT_OK_AND_ASSIGN(auto taken, client->CreateSession(config, {}, "mine"));
  EXPECT_STATUS_CODE(client->CreateSession(config, {}, "mine"),
                     absl::StatusCode::kAlreadyExists);
  // A GPU asked for, strictly, from a server without one.
  SessionConfig gpu = config;
  gpu.placement = Placement::kGpu;
  EXPECT_STATUS_CODE(client->CreateSession(gpu),
                     absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->counters().offline_sessions, 0);
}

TEST(FailOpenTest, FailedAttachAfterCreateGivesAnOfflineSessionAndNoOrphan) {
  server::ServerOptions server_options = TestServerOptions();
  server_options.max_streams = 1;
  auto server = StartTestServer(server_options);
  ASSERT_NE(server, nullptr);
  auto client = Connect(server->targets()[0]);
  ASSERT_NE(client, nullptr);
  const SessionConfig config = SmallConfig("tova", 4);
  ASSERT_OK_AND_ASSIGN(auto first, client->CreateSession(config));
  ASSERT_FALSE(first->degraded());

  // The server creates the second session, then refuses its stream.
  SessionOptions options;
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(auto second, client->CreateSession(config, options));
  EXPECT_LT(absl::Now() - start, options.create_deadline + kMargin);
  EXPECT_TRUE(second->degraded());
  EXPECT_TRUE(second->id().empty());
  EXPECT_STATUS_CODE(second->degraded_reason(),
                     absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(second->degraded_reason().message()),
              ::testing::HasSubstr("streams"));
  ExpectLocalStepsWithinBudget(second.get(), config.budget);

  // The server session it created is closed, not left to the idle timeout.
  std::vector<SessionInfo> sessions;
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK_AND_ASSIGN(sessions, client->ListSessions());
    if (sessions.size() == 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions[0].id, first->id());
}

TEST(FailOpenTest, CloseIsBoundedAndCompletesLocallyWhenTheServerHangs) {
  HangingService service(/*hang_create=*/false);
  std::string target;
  auto server = Serve(&service, &target);
  ASSERT_NE(server, nullptr);
  auto client = Connect(target);
  ASSERT_NE(client, nullptr);
  SessionOptions options;
  ASSERT_OK_AND_ASSIGN(auto session,
                       client->CreateSession(SmallConfig("tova", 4), options));
  ASSERT_FALSE(session->degraded());
  EXPECT_EQ(session->id(), "hanging");

  const absl::Time start = absl::Now();
  EXPECT_OK(session->Close());  // Completed locally.
  EXPECT_LT(absl::Now() - start, options.create_deadline + kMargin);
  EXPECT_EQ(service.close_calls(), 1);
  EXPECT_EQ(session->counters().unconfirmed_closes, 1);
  EXPECT_EQ(client->counters().unconfirmed_closes, 1);
  EXPECT_OK(session->Close());  // Idempotent: nothing is sent again.
  EXPECT_EQ(service.close_calls(), 1);
  session.reset();
  server->Shutdown(absl::ToChronoTime(absl::Now()));
}

TEST(FailOpenTest, CloseAfterTheServerStoppedCompletesLocally) {
  auto server = StartTestServer();
  ASSERT_NE(server, nullptr);
  auto client = Connect(server->targets()[0]);
  ASSERT_NE(client, nullptr);
  const SessionConfig config = SmallConfig("window", 4);
  ASSERT_OK_AND_ASSIGN(auto session, client->CreateSession(config));
  const auto story = MakeStory(config.shape, 0, 2);
  ASSERT_OK(session->Step(story[0].Request()));
  server->Shutdown(absl::ZeroDuration());
  const absl::Time start = absl::Now();
  EXPECT_OK(session->Close());
  EXPECT_LT(absl::Now() - start, SessionOptions().create_deadline + kMargin);
  EXPECT_EQ(session->counters().unconfirmed_closes, 1);
}

TEST(FailOpenTest, ServerGoneWithAnAnswerUnreadDoesNotHangAPipelinedStep) {
  for (StreamApi api : {StreamApi::kSync, StreamApi::kCallback}) {
    SCOPED_TRACE(api == StreamApi::kSync ? "sync" : "callback");
    auto server = StartTestServer();
    ASSERT_NE(server, nullptr);
    auto client = Connect(server->targets()[0]);
    ASSERT_NE(client, nullptr);
    SessionConfig config = SmallConfig("window", 3);
    config.streaming_sinks = 1;  // Fewer than the budget: the fallback evicts.
    SessionOptions options;
    options.stream_api = api;
    ASSERT_OK_AND_ASSIGN(auto session, client->CreateSession(config, options));
    const auto story = MakeStory(config.shape, 0, 4);
    ASSERT_OK(session->StepPipelined(story[0].Request()));
    // The server answers step 0, and goes away before it is read.
    absl::SleepFor(absl::Milliseconds(100));
    server->Shutdown(absl::ZeroDuration());
    const absl::Time start = absl::Now();
    for (size_t t = 1; t < story.size(); ++t) {
      ASSERT_OK_AND_ASSIGN(std::optional<StepOutcome> previous,
                           session->StepPipelined(story[t].Request()));
      ASSERT_TRUE(previous.has_value());
      EXPECT_LE(previous->live, config.budget);
    }
    ASSERT_OK(session->Flush());
    EXPECT_LT(absl::Now() - start, options.step_deadline + kMargin);
    EXPECT_TRUE(session->degraded());
    EXPECT_OK(session->Close());
  }
}

}  // namespace
}  // namespace entrokv
