// entrokv-loadgen (the binary) against an in-process server or the server
// binary: its report counts only the server's answers in the latency
// figures, counts the client library's local fallbacks apart, and says so
// plainly when the server has Echo disabled; in every client mode it
// survives a server that drains, is killed or is not there, counts the
// failed steps by status code, and exits non-zero only with --fail_on_error.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "server_test_util.h"

#ifndef ENTROKV_LOADGEN_BINARY
#error "ENTROKV_LOADGEN_BINARY must name the entrokv-loadgen executable"
#endif
#ifndef ENTROKV_SERVER_BINARY
#error "ENTROKV_SERVER_BINARY must name the entrokv-server executable"
#endif

namespace entrokv::server::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct LoadgenRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr.
};

LoadgenRun RunLoadgen(const std::vector<std::string>& args) {
  std::vector<std::string> quoted;
  for (const std::string& arg : args) quoted.push_back("'" + arg + "'");
  // A hung loadgen ends (exit 124) instead of hanging the test; one killed
  // by a signal (an abort) exits 128 + the signal.
  const std::string command =
      absl::StrCat("timeout -k 5 90 '", ENTROKV_LOADGEN_BINARY, "' ",
                   absl::StrJoin(quoted, " "), " 2>&1");
  LoadgenRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    run.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// The integer after "\"key\": " in `json` (its first occurrence); 0 when
// absent.
int64_t JsonInt(const std::string& json, const std::string& key) {
  const std::string prefix = absl::StrCat("\"", key, "\": ");
  const size_t at = json.find(prefix);
  if (at == std::string::npos) return 0;
  return std::strtoll(json.c_str() + at + prefix.size(), nullptr, 10);
}

// The sum of the integers after every "\"key\": " in `json`.
int64_t JsonSum(const std::string& json, const std::string& key) {
  const std::string prefix = absl::StrCat("\"", key, "\": ");
  int64_t sum = 0;
  for (size_t at = json.find(prefix); at != std::string::npos;
       at = json.find(prefix, at + 1)) {
    sum += std::strtoll(json.c_str() + at + prefix.size(), nullptr, 10);
  }
  return sum;
}

// The sum of the values of the flat object "\"key\": {...}" (its first
// occurrence) in `json`; -1 when absent.
int64_t JsonObjectSum(const std::string& json, const std::string& key) {
  const std::string prefix = absl::StrCat("\"", key, "\": {");
  const size_t at = json.find(prefix);
  if (at == std::string::npos) return -1;
  const size_t end = json.find('}', at);
  const std::string object = json.substr(at, end - at);
  int64_t sum = 0;
  for (size_t colon = object.find("\": ", prefix.size());
       colon != std::string::npos; colon = object.find("\": ", colon + 1)) {
    sum += std::strtoll(object.c_str() + colon + 3, nullptr, 10);
  }
  return sum;
}

// A small, fast workload.
std::vector<std::string> SmallWorkload(const std::string& target) {
  return {absl::StrCat("--target=", target),
          "--sessions=1",
          "--prefill=0",
          "--rounds=1",
          "--steps_per_round=20",
          "--layers=1",
          "--kv_heads=1",
          "--q_heads=1",
          "--head_dim=8",
          "--budget=4",
          "--policy=window",
          "--progress=false"};
}

// A server that accepts sessions and attaches them but never answers a
// step: every step the client library sends falls back at its deadline.
class SilentService final : public v1::EntroKv::CallbackService {
 public:
  grpc::ServerUnaryReactor* CreateSession(
      grpc::CallbackServerContext* context, const v1::CreateSessionRequest*,
      v1::CreateSessionResponse* response) override {
    response->set_session_id("silent-session");
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const v1::CloseSessionRequest*,
                                         v1::CloseSessionResponse*) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerBidiReactor<v1::DecodeRequest, v1::DecodeResponse>* Decode(
      grpc::CallbackServerContext*) override {
    return new SilentDecode();
  }

 private:
  // Answers attach-only messages; reads steps and answers nothing.
  class SilentDecode final
      : public grpc::ServerBidiReactor<v1::DecodeRequest, v1::DecodeResponse> {
   public:
    SilentDecode() { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      if (request_.steps_size() > 0) {
        StartRead(&request_);
        return;
      }
      response_.Clear();
      for (const std::string& id : request_.attach()) {
        response_.add_attach_results()->set_session_id(id);
      }
      StartWrite(&response_);
    }
    void OnWriteDone(bool ok) override {
      if (ok) {
        StartRead(&request_);
      } else {
        Finish(grpc::Status::CANCELLED);
      }
    }
    void OnDone() override { delete this; }

   private:
    v1::DecodeRequest request_;
    v1::DecodeResponse response_;
  };
};

// A run long enough to be cut mid-way: 2 sessions, paced so that each mode
// (entrokv, then the Echo baseline) lasts about 1 s, reported as JSON.
constexpr int kSessions = 2;
constexpr int kStepsPerRound = 400;
std::vector<std::string> PacedWorkload(const std::string& target,
                                       const std::string& mode, int batch) {
  const int threads = kSessions / batch;
  return {absl::StrCat("--target=", target),
          absl::StrCat("--sessions=", kSessions),
          "--prefill=0",
          "--rounds=1",
          absl::StrCat("--steps_per_round=", kStepsPerRound),
          absl::StrCat("--rate=", kStepsPerRound * threads),
          "--layers=1",
          "--kv_heads=1",
          "--q_heads=1",
          "--head_dim=8",
          "--budget=4",
          "--policy=window",
          "--progress=false",
          absl::StrCat("--mode=", mode),
          "--json"};
}

// Waits (at most 30 s) until `count()` reaches `n`; false if it did not.
template <typename Count>
bool WaitUntil(Count count, int64_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    if (count() >= n) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// How long the sessions step against the server before it goes away.
constexpr absl::Duration kServedFor = absl::Milliseconds(300);

class LoadgenTest : public ServerTest {
 protected:
  // Starts an in-process server (Echo on), runs the loadgen with `args` plus
  // its target, and drains the server (100 ms) once the sessions have
  // stepped for kServedFor.
  LoadgenRun RunAndDrain(
      const std::function<std::vector<std::string>(const std::string&)>& args) {
    ServerOptions options = TestServerOptions();
    options.enable_echo = true;
    StartServer(options);
    if (HasFatalFailure()) return {};
    LoadgenRun run;
    std::thread loadgen([&, command = args(server_->targets()[0])] {
      run = RunLoadgen(command);
    });
    EXPECT_TRUE(
        WaitUntil([&] { return server_->registry().size(); }, kSessions))
        << "the loadgen's sessions never started";
    absl::SleepFor(kServedFor);
    server_->Shutdown(absl::Milliseconds(100));
    loadgen.join();
    return run;
  }
};

// Against a server that never answers a step, every step is decided locally
// by the client library: none is a server answer, so the count, the status
// histogram and the latency percentiles are empty, and the report says how
// many steps fell back.
TEST_F(LoadgenTest, FallbackStepsAreNotCountedAsServerAnswers) {
  SilentService silent;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&silent);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::vector<std::string> args =
      SmallWorkload(absl::StrCat("127.0.0.1:", port));
  args.push_back("--client=library");
  args.push_back("--step_deadline=20ms");
  args.push_back("--mode=entrokv");

  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const LoadgenRun json = RunLoadgen(json_args);
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output, HasSubstr("\"count\": 0,"));
  EXPECT_THAT(json.output, HasSubstr("\"fallbacks\": 20,"));
  EXPECT_THAT(json.output, HasSubstr("\"status\": {}"));
  EXPECT_THAT(json.output, HasSubstr("\"latency_us\": {\"p50\": 0.0,"));

  const LoadgenRun text = RunLoadgen(args);
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output,
              HasSubstr("client fallbacks: 20 steps decided locally"));
  server->Shutdown(std::chrono::system_clock::now());
}

// Against the real server, drained mid-run: the steps before the drain are
// the server's answers (in the count and the status histogram), those after
// it are decided locally by the client library, and no step is both.
TEST_F(LoadgenTest, EveryStepIsEitherAnAnswerOrAFallback) {
  const LoadgenRun json = RunAndDrain([](const std::string& target) {
    std::vector<std::string> args = PacedWorkload(target, "entrokv", 1);
    args.push_back("--client=library");
    return args;
  });
  EXPECT_EQ(json.exit_code, 0) << json.output;
  const int64_t count = JsonInt(json.output, "count");
  const int64_t fallbacks = JsonInt(json.output, "fallbacks");
  const int64_t ok = JsonInt(json.output, "OK");
  EXPECT_GT(count, 0) << json.output;
  EXPECT_GT(fallbacks, 0) << json.output;
  EXPECT_EQ(count + fallbacks, kSessions * kStepsPerRound) << json.output;
  EXPECT_EQ(ok, count) << json.output;
  // The fallbacks are the run's failed steps, by the code of their cause.
  EXPECT_EQ(JsonInt(json.output, "failed_steps"), fallbacks) << json.output;
  EXPECT_EQ(JsonObjectSum(json.output, "fallback_causes"), fallbacks)
      << json.output;
}

// --duration runs whole rounds until the time has passed: at least that
// long, every round complete (count = rounds x steps per round), and more
// rounds than the one --rounds=1 asks for.
TEST_F(LoadgenTest, RunsRoundsUntilTheDurationHasPassed) {
  StartServer();
  std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
  args.push_back("--mode=entrokv");
  args.push_back("--duration=1500ms");
  args.push_back("--json");
  const absl::Time start = absl::Now();
  const LoadgenRun run = RunLoadgen(args);
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_GE(elapsed, absl::Milliseconds(1500));
  EXPECT_LT(elapsed, absl::Seconds(30));
  const int64_t rounds = JsonInt(run.output, "rounds");
  EXPECT_GE(rounds, 2) << run.output;
  EXPECT_EQ(JsonInt(run.output, "count"), rounds * 20) << run.output;
  EXPECT_EQ(JsonInt(run.output, "OK"), rounds * 20) << run.output;
  EXPECT_EQ(server_->registry().size(), 0u);  // Its session was closed.

  args.back() = "--duration=-1s";
  const LoadgenRun bad = RunLoadgen(args);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--duration"));
}

// The number after "\"key\": " in `json` (its first occurrence); NaN when
// absent or null.
double JsonDouble(const std::string& json, const std::string& key) {
  const std::string prefix = absl::StrCat("\"", key, "\": ");
  const size_t at = json.find(prefix);
  if (at == std::string::npos ||
      json.compare(at + prefix.size(), 4, "null") == 0) {
    return std::nan("");
  }
  return std::strtod(json.c_str() + at + prefix.size(), nullptr);
}

// On a unix: target the report gives the server process's CPU and context
// switches per step (its pid from the socket's peer: here this test's own
// process, which serves in process); --server_pid=-1 and a TCP target
// without --server_pid give none.
TEST_F(LoadgenTest, ReportsTheServerProcessPerStepOnAUnixTarget) {
  const std::string socket =
      absl::StrCat("/tmp/entrokv-test-", getpid(), "-process.sock");
  ServerOptions options = TestServerOptions();
  options.listen = {absl::StrCat("unix:", socket)};
  StartServer(options);
  ASSERT_FALSE(HasFatalFailure());
  std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
  args.push_back("--mode=entrokv");
  args.push_back("--steps_per_round=400");
  args.push_back("--json");
  const LoadgenRun run = RunLoadgen(args);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // Each step is a round trip from another process: the thread that reads
  // it has waited for it, one switch at least.
  EXPECT_GE(JsonDouble(run.output, "context_switches_per_step"), 0.5)
      << run.output;
  // 400 steps take at least a few 10 ms clock ticks of server CPU.
  EXPECT_GT(JsonDouble(run.output, "server_cpu_us_per_step"), 0.0)
      << run.output;

  args.push_back("--server_pid=-1");
  const LoadgenRun off = RunLoadgen(args);
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_THAT(off.output, HasSubstr("\"server_cpu_us_per_step\": null"));
  EXPECT_THAT(off.output, Not(HasSubstr("server process (pid")));
  server_->Shutdown(absl::Milliseconds(100));
  server_.reset();

  StartServer();  // 127.0.0.1: no peer pid to find.
  const LoadgenRun tcp = RunLoadgen(SmallWorkload(server_->targets()[0]));
  ASSERT_EQ(tcp.exit_code, 0) << tcp.output;
  EXPECT_THAT(tcp.output, Not(HasSubstr("server process (pid")));
  EXPECT_THAT(tcp.output, HasSubstr("its pid is unknown"));
}

// --shape=8b fills the 8B preset into the shape, sketch and cadence flags
// the command line does not give: here all but --decide_every.
TEST_F(LoadgenTest, TheEightBPresetYieldsToExplicitFlags) {
  StartServer();
  const LoadgenRun run = RunLoadgen(
      {absl::StrCat("--target=", server_->targets()[0]), "--shape=8b",
       "--decide_every=1", "--client=library", "--sessions=1", "--prefill=0",
       "--rounds=1", "--steps_per_round=5", "--budget=4", "--policy=window",
       "--mode=entrokv", "--progress=false"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("layers=4 kv_heads=8 q_heads=32 head_dim=128 f16 "
                        "sketch=project:16 query_form=group_sum  policy="));
  EXPECT_THAT(run.output, HasSubstr("OK=5"));

  const LoadgenRun bad = RunLoadgen(
      {absl::StrCat("--target=", server_->targets()[0]), "--shape=70b"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--shape: default or 8b"));
}

// Echo is off unless the server runs with --enable_echo: the load generator
// says so and still reports the entrokv mode.
TEST_F(LoadgenTest, SaysWhenTheServerHasEchoDisabled) {
  StartServer();
  std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
  args.push_back("--mode=both");
  const LoadgenRun run = RunLoadgen(args);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--enable_echo"));
  EXPECT_THAT(run.output, HasSubstr("entrokv "));
}

// A server that requires a bearer token: without --auth_token_file nothing
// is served (UNAUTHENTICATED, counted, exit 0); with it, every step is, in
// each client mode.
// The objects of the "policies" array in `json`, each as its text.
std::vector<std::string> PolicyRows(const std::string& json) {
  std::vector<std::string> rows;
  const size_t start = json.find("\"policies\": [");
  if (start == std::string::npos) return rows;
  const size_t end = json.find(']', start);
  for (size_t at = json.find('{', start); at != std::string::npos && at < end;
       at = json.find('{', at + 1)) {
    rows.push_back(json.substr(at, json.find('}', at) - at + 1));
  }
  return rows;
}

// The session's window and two shadow windows keep nested live sets (the
// newest 2 within the newest 4 within the newest 8), so their recall is
// ordered and the oracle's (at the session's budget) is above those of
// that budget or less; their Jaccard with the session's
// set is worked out from the sizes alone: min(n, 2 or 4) over min(n, 4 or 8)
// with n = t + 1 entries at step t.
TEST_F(LoadgenTest, ReportsEachShadowPolicysRecallBesideTheSession) {
  StartServer(TestServerOptions());
  ASSERT_FALSE(HasFatalFailure());
  const auto jaccard = [](int64_t small, int64_t large) {
    double sum = 0;
    for (int64_t n = 1; n <= 20; ++n) {
      sum += static_cast<double>(std::min(n, small)) /
             static_cast<double>(std::min(n, large));
    }
    return sum / 20;
  };
  for (const char* client : {"library", "library-callback"}) {
    SCOPED_TRACE(client);
    std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
    for (const char* flag :
         {"--sessions=2", "--mode=entrokv", "--json", "--fail_on_error",
          "--shadows=window@2,window@8,h2o"}) {
      args.push_back(flag);
    }
    args.push_back(absl::StrCat("--client=", client));
    const LoadgenRun run = RunLoadgen(args);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const std::vector<std::string> rows = PolicyRows(run.output);
    ASSERT_EQ(rows.size(), 5u) << run.output;
    const char* want[][3] = {{"session", "window+fixed", "4"},
                             {"shadow", "window+fixed", "2"},
                             {"shadow", "window+fixed", "8"},
                             {"shadow", "h2o+fixed", "4"},
                             {"oracle", "oracle", "4"}};
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_THAT(rows[i], HasSubstr(absl::StrCat("\"role\": \"", want[i][0],
                                                  "\", \"policy\": \"",
                                                  want[i][1], "\", \"budget\": ",
                                                  want[i][2], ",")));
      EXPECT_EQ(JsonDouble(rows[i], "sessions"), 2) << rows[i];
      EXPECT_EQ(JsonDouble(rows[i], "steps"), 40) << rows[i];
      EXPECT_EQ(JsonDouble(rows[i], "stopped"), 0) << rows[i];
    }
    const double session = JsonDouble(rows[0], "recall_mean");
    const double small = JsonDouble(rows[1], "recall_mean");
    const double large = JsonDouble(rows[2], "recall_mean");
    EXPECT_LT(small, session);
    EXPECT_LT(session, large);
    for (size_t i = 0; i + 1 < rows.size(); ++i) {
      // The oracle holds the session's budget: above every row of that
      // budget or less (not window@8's).
      if (i != 2) {
        EXPECT_GE(JsonDouble(rows[4], "recall_mean") + 1e-6,
                  JsonDouble(rows[i], "recall_mean"))
            << rows[i];
      }
      EXPECT_NEAR(JsonDouble(rows[i], "vs_session"),
                  JsonDouble(rows[i], "recall_mean") - session, 2e-6);
    }
    EXPECT_NEAR(JsonDouble(rows[0], "jaccard"), 1.0, 1e-6);
    EXPECT_NEAR(JsonDouble(rows[1], "jaccard"), jaccard(2, 4), 1e-6);
    EXPECT_NEAR(JsonDouble(rows[2], "jaccard"), jaccard(4, 8), 1e-6);
    EXPECT_THAT(rows[4], HasSubstr("\"jaccard\": null"));
  }
  // Shadows are the client library's: the bare sync client refuses them.
  std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
  args.push_back("--client=sync");
  args.push_back("--shadows=h2o");
  const LoadgenRun refused = RunLoadgen(args);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("--shadows needs the client library"));
}

TEST_F(LoadgenTest, ReachesATokenServerWithAuthTokenFile) {
  const std::string token_file =
      absl::StrCat(::testing::TempDir(), "loadgen-token-", getpid());
  {
    std::ofstream out(token_file);
    out << "loadgen-s3cret\n";
  }
  ServerOptions options = TestServerOptions();
  options.auth_token_file = token_file;
  StartServer(options);
  ASSERT_FALSE(HasFatalFailure());
  for (const char* client : {"sync", "library", "library-callback"}) {
    SCOPED_TRACE(client);
    std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
    args.push_back(absl::StrCat("--client=", client));
    args.push_back("--mode=entrokv");
    args.push_back("--json");
    const LoadgenRun refused = RunLoadgen(args);
    EXPECT_EQ(refused.exit_code, 0) << refused.output;
    EXPECT_THAT(refused.output, HasSubstr("UNAUTHENTICATED"));
    EXPECT_EQ(JsonInt(refused.output, "count"), 0) << refused.output;
    args.push_back(absl::StrCat("--auth_token_file=", token_file));
    args.push_back("--fail_on_error");
    const LoadgenRun served = RunLoadgen(args);
    EXPECT_EQ(served.exit_code, 0) << served.output;
    EXPECT_EQ(JsonInt(served.output, "count"), 20) << served.output;
    EXPECT_THAT(served.output, Not(HasSubstr("UNAUTHENTICATED")));
  }
  std::remove(token_file.c_str());
}

// ---------------------------------------------------------------------------
// A server that drains, is killed or is not there, in every client mode.

struct ClientMode {
  std::string name;
  std::vector<std::string> flags;
  int batch = 1;  // Sessions per thread (--batch).
};

void PrintTo(const ClientMode& mode, std::ostream* os) {
  *os << absl::StrJoin(mode.flags, " ");
}

std::string ModeName(const ::testing::TestParamInfo<ClientMode>& info) {
  return info.param.name;
}

// What a run that lost its server shows: the report with every planned step
// accounted for (answered OK, or failed and counted by status code), some
// failed, and the exit code --fail_on_error asks for; never an abort.
void ExpectFailuresReported(const LoadgenRun& run, bool fail_on_error) {
  EXPECT_EQ(run.exit_code, fail_on_error ? 1 : 0) << run.output;
  EXPECT_THAT(run.output, Not(HasSubstr("TOO_MANY_OPERATIONS")));
  const int64_t planned = JsonInt(run.output, "planned_steps");
  const int64_t failed = JsonInt(run.output, "failed_steps");
  EXPECT_EQ(planned, int64_t{kSessions} * kStepsPerRound * 2) << run.output;
  EXPECT_GT(failed, 0) << run.output;
  EXPECT_EQ(JsonSum(run.output, "OK") + failed, planned) << run.output;
  EXPECT_EQ(JsonObjectSum(run.output, "steps_by_code"), failed) << run.output;
}

class LoadgenLosesServerTest
    : public LoadgenTest,
      public ::testing::WithParamInterface<ClientMode> {
 protected:
  std::vector<std::string> Args(const std::string& target,
                                bool fail_on_error) const {
    std::vector<std::string> args =
        PacedWorkload(target, "both", GetParam().batch);
    args.insert(args.end(), GetParam().flags.begin(), GetParam().flags.end());
    if (fail_on_error) args.push_back("--fail_on_error");
    return args;
  }

  // A stub for the server listening on `socket`, once it accepts
  // connections (null, with a failure, if it never does).
  static std::unique_ptr<v1::EntroKv::Stub> ConnectWhenUp(
      const std::string& socket) {
    auto channel = grpc::CreateChannel(absl::StrCat("unix:", socket),
                                       grpc::InsecureChannelCredentials());
    if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                   std::chrono::seconds(30))) {
      ADD_FAILURE() << "the server never listened on " << socket;
      return nullptr;
    }
    return v1::EntroKv::NewStub(channel);
  }

  // Waits until the loadgen's sessions are open, then lets them be served
  // for `served_for`.
  static void ExpectServedFor(v1::EntroKv::Stub* stub,
                              absl::Duration served_for) {
    EXPECT_TRUE(WaitUntil(
        [&]() -> int64_t {
          absl::StatusOr<v1::ListSessionsResponse> list = ListSessions(stub);
          return list.ok() ? list->sessions_size() : 0;
        },
        kSessions))
        << "the loadgen's sessions never started";
    absl::SleepFor(served_for);
  }
};

// SIGTERM's drain, in process: the streams are cut after 100 ms.
TEST_P(LoadgenLosesServerTest, SurvivesADrain) {
  for (const bool fail_on_error : {false, true}) {
    SCOPED_TRACE(fail_on_error ? "--fail_on_error" : "default");
    const LoadgenRun run = RunAndDrain(
        [&](const std::string& target) { return Args(target, fail_on_error); });
    ExpectFailuresReported(run, fail_on_error);
    // Served before the drain.
    EXPECT_GT(JsonInt(run.output, "OK"), 0) << run.output;
  }
}

// Runs the server binary on a unix socket; returns its pid.
pid_t SpawnServer(const std::string& socket) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    std::vector<std::string> args = {ENTROKV_SERVER_BINARY,
                                     absl::StrCat("--listen=unix:", socket),
                                     "--gpu=false", "--enable_echo"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// SIGKILL of the server binary: no drain, no status, the connection drops.
TEST_P(LoadgenLosesServerTest, SurvivesAKilledServer) {
  for (const bool fail_on_error : {false, true}) {
    SCOPED_TRACE(fail_on_error ? "--fail_on_error" : "default");
    const std::string socket =
        absl::StrCat("/tmp/entrokv-test-", getpid(), "-loadgen-kill.sock");
    unlink(socket.c_str());
    const pid_t pid = SpawnServer(socket);
    ASSERT_GT(pid, 0);
    auto stub = ConnectWhenUp(socket);
    ASSERT_NE(stub, nullptr);
    LoadgenRun run;
    std::thread loadgen(
        [&, command = Args(absl::StrCat("unix:", socket), fail_on_error)] {
          run = RunLoadgen(command);
        });
    ExpectServedFor(stub.get(), kServedFor);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    waitpid(pid, nullptr, 0);
    loadgen.join();
    unlink(socket.c_str());
    ExpectFailuresReported(run, fail_on_error);
    EXPECT_GT(JsonInt(run.output, "OK"), 0) << run.output;
  }
}

// A server that stops answering but keeps its connections (SIGSTOP): no
// client mode hangs; a blocking stream is cancelled after --sync_timeout.
TEST_P(LoadgenLosesServerTest, SurvivesAStoppedServer) {
  const std::string socket =
      absl::StrCat("/tmp/entrokv-test-", getpid(), "-loadgen-stop.sock");
  unlink(socket.c_str());
  const pid_t pid = SpawnServer(socket);
  ASSERT_GT(pid, 0);
  auto stub = ConnectWhenUp(socket);
  ASSERT_NE(stub, nullptr);
  LoadgenRun run;
  std::vector<std::string> command =
      Args(absl::StrCat("unix:", socket), /*fail_on_error=*/false);
  command.push_back("--sync_timeout=1s");
  command.push_back("--create_deadline=1s");
  std::thread loadgen([&] { run = RunLoadgen(command); });
  ExpectServedFor(stub.get(), kServedFor);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  loadgen.join();  // RunLoadgen gives up (exit 124) after 90 s.
  kill(pid, SIGCONT);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  unlink(socket.c_str());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ExpectFailuresReported(run, /*fail_on_error=*/false);
  EXPECT_GT(JsonInt(run.output, "OK"), 0) << run.output;
}

// Nothing listens at the target: every session fails to start, every step
// is counted as not sent, and the report still comes (JSON and text).
TEST_P(LoadgenLosesServerTest, SurvivesADeadTarget) {
  const std::string target =
      absl::StrCat("unix:/tmp/entrokv-test-", getpid(), "-nothing.sock");
  const LoadgenRun json = RunLoadgen(Args(target, false));
  ExpectFailuresReported(json, false);
  EXPECT_EQ(JsonSum(json.output, "OK"), 0) << json.output;
  EXPECT_EQ(JsonObjectSum(json.output, "sessions_not_started"), kSessions)
      << json.output;

  std::vector<std::string> text_args = Args(target, true);
  text_args.erase(std::find(text_args.begin(), text_args.end(), "--json"));
  const LoadgenRun text = RunLoadgen(text_args);
  EXPECT_EQ(text.exit_code, 1) << text.output;
  EXPECT_THAT(text.output,
              HasSubstr(absl::StrCat(
                  "failures: ", kSessions * kStepsPerRound * 2, " of ",
                  kSessions * kStepsPerRound * 2, " steps not answered OK")));
  EXPECT_THAT(text.output, HasSubstr("sessions that failed to start: "));
}

INSTANTIATE_TEST_SUITE_P(
    ClientModes, LoadgenLosesServerTest,
    ::testing::Values(
        ClientMode{"Sync", {"--client=sync"}},
        ClientMode{"Library", {"--client=library"}},
        ClientMode{"LibraryCallback", {"--client=library-callback"}},
        ClientMode{"Batch", {"--client=library", "--batch=2"}, 2},
        ClientMode{
            "BatchCallback", {"--client=library-callback", "--batch=2"}, 2}),
    ModeName);

}  // namespace
}  // namespace entrokv::server::testing
