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
#include <cstdlib>
#include <map>
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
#include "testing/engine_cache.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::MakeStory;
using ::entrokv::testing::SmallConfig;
using ::entrokv::testing::StartTestServer;
using ::entrokv::testing::StoryStep;
using ::entrokv::testing::TestServerOptions;

constexpr absl::Duration kStepEvery = absl::Milliseconds(20);

// The outage: `default_outage`, or ENTROKV_RESTART_OUTAGE (an absl duration
// such as "30s") to measure longer ones.
absl::Duration Outage(absl::Duration default_outage) {
  absl::Duration outage;
  const char* set = std::getenv("ENTROKV_RESTART_OUTAGE");
  if (set != nullptr && absl::ParseDuration(set, &outage)) return outage;
  return default_outage;
}

// How the server goes away: a graceful Shutdown() of the in-process server
// (streams end, connections close with GOAWAY), SIGKILL of a server process
// (connections reset, nothing said), or SIGSTOP of a server process
// (connections stay open and nothing is answered; "restart" is SIGCONT).
enum class Stop { kShutdown, kKill, kPause };

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

// True once process `pid` is stopped (state T in /proc/PID/stat).
bool Stopped(pid_t pid) {
  std::FILE* file =
      std::fopen(absl::StrCat("/proc/", pid, "/stat").c_str(), "r");
  if (file == nullptr) return false;
  char buffer[512] = {};
  const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, file);
  std::fclose(file);
  // "PID (COMM) STATE ...": the state follows the last ')'.
  const std::string stat(buffer, n);
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         stat[paren + 2] == 'T';
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
    if (GetParam() == Stop::kPause && pid_ > 0) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return;
    }
    if (pid_ > 0 || server_ != nullptr) StopServer();
  }

  void StopServer() {
    if (GetParam() == Stop::kShutdown) {
      server_->Shutdown(absl::ZeroDuration());
      server_.reset();
    } else if (GetParam() == Stop::kPause) {
      kill(pid_, SIGSTOP);
      // kill() returns before the process has stopped: wait until it has.
      for (int i = 0; i < 200 && !Stopped(pid_); ++i) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      EXPECT_TRUE(Stopped(pid_));
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

  // Starts the server again (kPause: lets it go on); the time it started
  // serving.
  absl::Time Restart() {
    if (GetParam() == Stop::kPause) {
      kill(pid_, SIGCONT);
      return absl::Now();
    }
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
    switch (GetParam()) {
      case Stop::kShutdown:
        return "shutdown";
      case Stop::kKill:
        return "kill -9";
      case Stop::kPause:
        return "SIGSTOP/SIGCONT";
    }
    return "?";
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

  // An outage (4 s by default) during which the engine keeps starting
  // sequences: each gets an offline session at once.
  StopServer();
  const absl::Time outage_end = absl::Now() + Outage(absl::Seconds(4));
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
  // The channel's reconnect backoff is at most 250 ms (+ 20 % jitter) by
  // default: gRPC's own default (up to 120 s) left new sessions offline for
  // seconds after a short outage. The bound leaves room for a loaded CI
  // machine; tests/fault measures the times.
  EXPECT_LT(*served, absl::Seconds(2));
}

// One sequence of an engine that owns its KV cache: the keys of its live
// entries, fed from a story, handed to the session's recovery callback.
class Sequence {
 public:
  // `callback`: give the session the live-keys callback. `pipelined`: step
  // with StepPipelined. `decide_every` > 1: send queries on decision steps
  // only, as NextStepDecides() says.
  Sequence(std::string name, int steps, bool callback, bool pipelined,
           int32_t decide_every = 1)
      : name_(std::move(name)), pipelined_(pipelined) {
    config_ = SmallConfig("tova", 8);
    config_.protection.sinks = 1;
    config_.decide_every = decide_every;
    story_ = MakeStory(config_.shape, 0, steps, /*seed=*/name_.size());
    options_.step_deadline = absl::Milliseconds(200);
    if (callback) {
      options_.live_keys = [this](absl::Span<const uint64_t> slots,
                                  std::vector<float>* keys) {
        return testing::GatherKeys(keys_, slots, keys);
      };
    }
  }

  absl::Status Create(Client* client) {
    absl::StatusOr<std::unique_ptr<Session>> session =
        client->CreateSession(config_, options_);
    if (!session.ok()) return session.status();
    session_ = *std::move(session);
    return absl::OkStatus();
  }

  // Steps the next story entry (the first one pinned). The outcome settled
  // by this call, if any: step t's own, or step t-1's when pipelined.
  std::optional<StepOutcome> Step() {
    const StoryStep& step = story_[next_];
    keys_[step.slots[0]] = step.keys;
    StepRequest request = step.Request();
    static const uint8_t kPinned = 1;
    if (next_ == 0) request.pinned = {&kPinned, 1};
    if (!session_->NextStepDecides(1)) {
      request.queries = VectorView();
      request.entropy.reset();
    }
    ++next_;
    std::optional<StepOutcome> settled;
    if (pipelined_) {
      absl::StatusOr<std::optional<StepOutcome>> previous =
          session_->StepPipelined(request);
      EXPECT_TRUE(previous.ok()) << name_ << ": " << previous.status();
      if (previous.ok()) settled = *previous;
    } else {
      absl::StatusOr<StepOutcome> outcome = session_->Step(request);
      EXPECT_TRUE(outcome.ok()) << name_ << ": " << outcome.status();
      if (outcome.ok()) settled = *outcome;
    }
    if (settled.has_value()) Settle(*settled);
    return settled;
  }

  // Collects the step still in flight (pipelined).
  void Flush() {
    absl::StatusOr<std::optional<StepOutcome>> last = session_->Flush();
    ASSERT_TRUE(last.ok()) << last.status();
    if (last->has_value()) Settle(**last);
  }

  Session* session() { return session_.get(); }
  const SessionConfig& config() const { return config_; }
  int64_t held() const { return static_cast<int64_t>(keys_.size()); }
  const std::string& name() const { return name_; }

 private:
  // Frees what the outcome says, and checks what every engine may rely on.
  void Settle(const StepOutcome& outcome) {
    EXPECT_EQ(outcome.step, settled_) << name_;
    ++settled_;
    for (uint64_t slot : outcome.evicted) {
      EXPECT_NE(slot, story_[0].slots[0]) << name_ << ": pinned evicted";
      EXPECT_EQ(keys_.erase(slot), 1u) << name_ << ": " << slot;
    }
    // Pipelined, the engine frees one step late: it holds one more entry;
    // between decision steps (decide_every > 1) the server only appends.
    EXPECT_LE(held(), config_.budget + (pipelined_ ? 1 : 0) +
                          (config_.decide_every - 1))
        << name_ << " at step " << outcome.step;
  }

  std::string name_;
  bool pipelined_;
  SessionConfig config_;
  SessionOptions options_;
  std::vector<StoryStep> story_;
  std::unique_ptr<Session> session_;
  testing::EngineCache keys_;  // The engine's KV cache.
  size_t next_ = 0;
  uint64_t settled_ = 0;
};

TEST_P(RestartTest, SessionsThatLivedThroughARestartAreServedAgain) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const absl::Duration outage = Outage(absl::Seconds(1));
  // Enough story for 30 steps, the outage, 5 s and 20 steps, every 20 ms.
  const int steps = 200 + static_cast<int>((outage + absl::Seconds(5)) /
                                           absl::Milliseconds(10));
  std::vector<std::unique_ptr<Sequence>> sequences;
  sequences.push_back(
      std::make_unique<Sequence>("blocking", steps, true, false));
  sequences.push_back(
      std::make_unique<Sequence>("pipelined", steps, true, true));
  sequences.push_back(
      std::make_unique<Sequence>("decide_every_2", steps, true, false, 2));
  sequences.push_back(
      std::make_unique<Sequence>("no_callback", steps, false, false));
  std::vector<std::string> ids;
  for (auto& sequence : sequences) {
    ASSERT_OK(sequence->Create(client.get()));
    ASSERT_FALSE(sequence->session()->degraded());
    ids.push_back(sequence->session()->id());
  }
  auto step_all = [&]() {
    for (auto& sequence : sequences) sequence->Step();
  };

  // Served, then an outage (1 s by default): every step is decided locally.
  for (int t = 0; t < 30; ++t) step_all();
  for (auto& sequence : sequences) {
    EXPECT_EQ(sequence->session()->counters().fallback_steps, 0)
        << sequence->name();
  }
  StopServer();
  const absl::Time outage_end = absl::Now() + outage;
  while (absl::Now() < outage_end) {
    step_all();
    absl::SleepFor(kStepEvery);
  }
  for (auto& sequence : sequences) {
    EXPECT_TRUE(sequence->session()->degraded()) << sequence->name();
  }

  // Back: steps every 20 ms until every session with a callback is served.
  const absl::Time restarted = Restart();
  std::vector<std::optional<absl::Duration>> served(sequences.size());
  auto all_served = [&]() {
    for (size_t i = 0; i + 1 < sequences.size(); ++i) {
      if (!served[i].has_value()) return false;
    }
    return true;
  };
  while (!all_served() && absl::Now() - restarted < absl::Seconds(5)) {
    for (size_t i = 0; i < sequences.size(); ++i) {
      std::optional<StepOutcome> outcome = sequences[i]->Step();
      if (outcome.has_value() && !outcome->fallback && !served[i]) {
        served[i] = absl::Now() - restarted;
      }
    }
    absl::SleepFor(kStepEvery);
  }
  for (size_t i = 0; i + 1 < sequences.size(); ++i) {
    ASSERT_TRUE(served[i].has_value())
        << sequences[i]->name() << ": not served 5 s after the restart";
    std::printf(
        "%s, restart -> first server-decided step of a session that "
        "lived through it (%s): %s\n",
        StopName(), sequences[i]->name().c_str(),
        absl::FormatDuration(*served[i]).c_str());
    // The health watch notices within about a check (100 ms) plus, after a
    // kill, the channel's reconnect backoff (at most 250 ms + 20 %); the wait
    // before an attempt never grew, since none was made while it was down.
    // The bound leaves room for a loaded CI machine.
    EXPECT_LT(*served[i], absl::Seconds(3)) << sequences[i]->name();
  }

  // Online again under a new id; served from now on.
  for (int t = 0; t < 20; ++t) step_all();
  for (size_t i = 0; i + 1 < sequences.size(); ++i) {
    Session* session = sequences[i]->session();
    EXPECT_FALSE(session->degraded()) << sequences[i]->name();
    EXPECT_NE(session->id(), ids[i]);
    EXPECT_EQ(session->counters().recoveries, 1);
    // The health watch let no attempt run while the server was away (a
    // stopped server would have held each for create_deadline).
    EXPECT_EQ(session->counters().recovery_attempts, 1) << sequences[i]->name();
    // The server holds what the engine holds.
    sequences[i]->Flush();
    ASSERT_OK_AND_ASSIGN(SessionInfo info, client->GetSession(session->id()));
    EXPECT_EQ(info.stats.live, sequences[i]->held()) << sequences[i]->name();
    EXPECT_EQ(info.stats.live,
              static_cast<int64_t>(session->LiveSlots().size()));
  }
  // Without a callback a session stays local, within its budget.
  Session* local = sequences.back()->session();
  EXPECT_TRUE(local->degraded());
  EXPECT_EQ(local->counters().recovery_attempts, 0);
  EXPECT_EQ(local->counters().server_steps, 30);
  EXPECT_EQ(client->counters().recoveries, 3);

  for (auto& sequence : sequences) EXPECT_OK(sequence->session()->Close());
  ASSERT_OK_AND_ASSIGN(std::vector<SessionInfo> left, client->ListSessions());
  EXPECT_THAT(left, ::testing::IsEmpty());
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
                         ::testing::Values(Stop::kShutdown, Stop::kKill,
                                           Stop::kPause),
                         [](const auto& info) {
                           switch (info.param) {
                             case Stop::kShutdown:
                               return std::string("Shutdown");
                             case Stop::kKill:
                               return std::string("Kill");
                             case Stop::kPause:
                               return std::string("Pause");
                           }
                           return std::string("Unknown");
                         });

}  // namespace
}  // namespace entrokv
