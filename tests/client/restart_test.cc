// A sidecar restart (a rolling update, or a crash and its restart): the
// server stops -- gracefully (Shutdown() of an in-process server) or by
// SIGKILL of a server process -- the engine keeps decoding locally within its
// budgets, the server comes back on the same address, and service must come
// back by itself within a bounded time. Each test prints the time from the
// restart (the server accepting connections again) to the first
// server-decided step.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client_test_util.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::MakeStory;
using ::entrokv::testing::SmallConfig;
using ::entrokv::testing::StartTestServer;
using ::entrokv::testing::StoryStep;
using ::entrokv::testing::TestServerOptions;

constexpr absl::Duration kStepEvery = absl::Milliseconds(20);

// How the server goes away: a graceful Shutdown() of the in-process server
// (streams end, connections close with GOAWAY), or SIGKILL of a server
// process (connections reset, nothing said).
enum class Stop { kShutdown, kKill };

// A free TCP port on 127.0.0.1 (free when this returns).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// True once something accepts TCP connections on 127.0.0.1:`port`.
bool Accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return ok;
}

// An entrokv server, in process or as a process of its own, that can be
// stopped and started again on the same address.
class RestartTest : public ::testing::TestWithParam<Stop> {
 protected:
  void SetUp() override {
    port_ = FreePort();
    target_ = absl::StrCat("127.0.0.1:", port_);
    ASSERT_TRUE(Start());
  }
  void TearDown() override {
    if (pid_ > 0 || server_ != nullptr) StopServer();
  }

  void StopServer() {
    if (GetParam() == Stop::kShutdown) {
      server_->Shutdown(absl::ZeroDuration());
      server_.reset();
    } else {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  // Starts the server on target_; true once it accepts connections.
  bool Start() {
    if (GetParam() == Stop::kShutdown) {
      server_ = StartTestServer(TestServerOptions(target_));
      return server_ != nullptr;
    }
    const std::string listen = absl::StrCat("--listen=", target_);
    pid_ = fork();
    if (pid_ == 0) {
      execl(ENTROKV_SERVER_BINARY, ENTROKV_SERVER_BINARY, listen.c_str(),
            "--gpu=false", "--log_level=warn", "--max_bytes=1073741824",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 500; ++i) {
      if (Accepts(port_)) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "the server process does not listen on " << target_;
    return false;
  }

  // Starts the server again; the time it started serving.
  absl::Time Restart() {
    EXPECT_TRUE(Start());
    return absl::Now();
  }

  std::unique_ptr<Client> Connect(ClientOptions options = {}) {
    options.target = target_;
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  const char* StopName() const {
    return GetParam() == Stop::kShutdown ? "shutdown" : "kill -9";
  }

  int port_ = 0;
  std::string target_;
  std::unique_ptr<server::Server> server_;  // kShutdown.
  pid_t pid_ = -1;                          // kKill.
};

TEST_P(RestartTest, NewSessionsAreServedSoonAfterARestart) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const SessionConfig config = SmallConfig("tova", 4);
  const std::vector<StoryStep> story = MakeStory(config.shape, 0, 1);
  {
    ASSERT_OK_AND_ASSIGN(auto session, client->CreateSession(config));
    ASSERT_FALSE(session->degraded());
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome,
                         session->Step(story[0].Request()));
    EXPECT_FALSE(outcome.fallback);
    EXPECT_OK(session->Close());
  }

  // A 4 s outage during which the engine keeps starting sequences: each gets
  // an offline session at once.
  StopServer();
  const absl::Time outage_end = absl::Now() + absl::Seconds(4);
  int offline = 0;
  while (absl::Now() < outage_end) {
    const absl::Time start = absl::Now();
    ASSERT_OK_AND_ASSIGN(auto session, client->CreateSession(config));
    EXPECT_TRUE(session->degraded());
    EXPECT_LT(absl::Now() - start,
              SessionOptions().create_deadline + absl::Milliseconds(400));
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome,
                         session->Step(story[0].Request()));
    EXPECT_TRUE(outcome.fallback);
    EXPECT_OK(session->Close());
    ++offline;
    absl::SleepFor(kStepEvery);
  }
  EXPECT_GT(offline, 10);

  // Back: a sequence started every 20 ms; the first one the server serves.
  const absl::Time restarted = Restart();
  std::optional<absl::Duration> served;
  while (!served.has_value() && absl::Now() - restarted < absl::Seconds(10)) {
    ASSERT_OK_AND_ASSIGN(auto session, client->CreateSession(config));
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome,
                         session->Step(story[0].Request()));
    if (!outcome.fallback) served = absl::Now() - restarted;
    EXPECT_OK(session->Close());
    if (!served.has_value()) absl::SleepFor(kStepEvery);
  }
  ASSERT_TRUE(served.has_value()) << "no session served 10 s after restart";
  std::printf("%s, restart -> first server-decided step of a new session: %s\n",
              StopName(), absl::FormatDuration(*served).c_str());
  // The channel's reconnect backoff is at most 1 s (+ 20 % jitter) by
  // default: gRPC's own default (up to 120 s) left new sessions offline for
  // seconds after a short outage.
  EXPECT_LT(*served, absl::Seconds(2));
}

TEST(ReconnectOptionsTest, ConnectRejectsBadBackoffSettings) {
  ClientOptions options;
  options.target = "127.0.0.1:1";
  EXPECT_OK(Client::Connect(options));
  ClientOptions zero = options;
  zero.reconnect_initial_backoff = absl::ZeroDuration();
  EXPECT_STATUS_CODE(Client::Connect(zero), absl::StatusCode::kInvalidArgument);
  ClientOptions inverted = options;
  inverted.reconnect_initial_backoff = absl::Seconds(2);
  inverted.reconnect_max_backoff = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<Client>> rejected = Client::Connect(inverted);
  EXPECT_STATUS_CODE(rejected, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rejected.status().message()),
              ::testing::HasSubstr("reconnect_max_backoff"));
  ClientOptions negative = options;
  negative.connect_timeout = absl::Milliseconds(-1);
  EXPECT_STATUS_CODE(Client::Connect(negative),
                     absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(StopKinds, RestartTest,
                         ::testing::Values(Stop::kShutdown, Stop::kKill),
                         [](const auto& info) {
                           return info.param == Stop::kShutdown
                                      ? std::string("Shutdown")
                                      : std::string("Kill");
                         });

}  // namespace
}  // namespace entrokv
