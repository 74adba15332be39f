// entrokv-loadgen (the binary) against an in-process server or the server
// binary (loadgen_report_test.cc has the rest of its report): its report
// counts only the server's answers in the latency
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
#include "loadgen_test_util.h"
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
// (entrokv, then the Echo baseline) lasts about 1 s whatever the batch
// (--rate counts steps over all sessions), reported as JSON.
constexpr int kSessions = 2;
constexpr int kStepsPerRound = 400;
std::vector<std::string> PacedWorkload(const std::string& target,
                                       const std::string& mode) {
  return {absl::StrCat("--target=", target),
          absl::StrCat("--sessions=", kSessions),
          "--prefill=0",
          "--rounds=1",
          absl::StrCat("--steps_per_round=", kStepsPerRound),
          absl::StrCat("--rate=", kStepsPerRound * kSessions),
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
    std::vector<std::string> args = PacedWorkload(target, "entrokv");
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
  // The warning is a log line, on stderr: with --json, stdout is the
  // report alone, one JSON object.
  args.push_back("--json");
  const LoadgenRun json = RunLoadgen(args, /*with_stderr=*/false);
  EXPECT_EQ(json.exit_code, 0) << json.output;
  ASSERT_FALSE(json.output.empty());
  EXPECT_EQ(json.output.front(), '{') << json.output;
  EXPECT_EQ(json.output[json.output.find_last_not_of('\n')], '}')
      << json.output;
}

// Every way of stepping a batch (--batch_calls) answers every planned step
// and counts it once: 4 sessions of a window of 4, 2 rounds of 20 steps of
// one entry each, so each session evicts 40 - 4 entries (0.9 a step); each
// message counted once (40 per mode), its bytes once (the same bytes per
// step as the whole batch in one call, and echo's messages that size); in
// the pipelined way too, whose last message is still in flight when its
// phase's steps have been sent.
TEST_F(LoadgenTest, EveryWayOfSteppingABatchCountsEachStepOnce) {
  ServerOptions options = TestServerOptions();
  options.enable_echo = true;
  StartServer(options);
  const auto bytes_per_step = [](const std::string& json,
                                 const std::string& mode) {
    const std::string part = json.substr(json.find("\"" + mode + "\": {"));
    return JsonDouble(part, "bytes_sent_per_s") /
           JsonDouble(part, "steps_per_s");
  };
  double batch_bytes = 0.0;
  for (const char* calls : {"batch", "session", "pipelined"}) {
    SCOPED_TRACE(calls);
    std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
    args[1] = "--sessions=4";
    args[3] = "--rounds=2";
    for (const char* flag : {"--batch=4", "--mode=both", "--json"}) {
      args.push_back(flag);
    }
    args.push_back(absl::StrCat("--batch_calls=", calls));
    const LoadgenRun run = RunLoadgen(args);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_THAT(run.output,
                HasSubstr(absl::StrCat("\"batch_calls\": \"", calls, "\"")));
    const std::string entrokv =
        run.output.substr(run.output.find("\"entrokv\": {"));
    EXPECT_EQ(JsonInt(entrokv, "count"), 40) << run.output;
    EXPECT_EQ(JsonInt(entrokv, "OK"), 160) << run.output;
    EXPECT_EQ(JsonInt(entrokv, "fallbacks"), 0) << run.output;
    EXPECT_NEAR(JsonDouble(entrokv, "evictions_per_step"), 0.9, 1e-9)
        << run.output;
    EXPECT_EQ(JsonInt(run.output, "failed_steps"), 0) << run.output;
    // The rates are rounded to whole bytes a second, hence the tolerance.
    const double sent = bytes_per_step(run.output, "entrokv");
    if (batch_bytes == 0.0) batch_bytes = sent;
    EXPECT_NEAR(sent, batch_bytes, 0.02 * batch_bytes) << run.output;
    EXPECT_NEAR(bytes_per_step(run.output, "echo"), sent, 0.05 * sent)
        << run.output;
  }
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
    std::vector<std::string> args = PacedWorkload(target, "both");
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

const ClientMode kClientModes[] = {
    {"Sync", {"--client=sync"}},
    {"Library", {"--client=library"}},
    {"LibraryCallback", {"--client=library-callback"}},
    {"Batch", {"--client=library", "--batch=2"}, 2},
    {"BatchSessionCalls",
     {"--client=library", "--batch=2", "--batch_calls=session"},
     2},
    {"BatchPipelined",
     {"--client=library", "--batch=2", "--batch_calls=pipelined"},
     2},
    {"BatchCallback", {"--client=library-callback", "--batch=2"}, 2},
};

INSTANTIATE_TEST_SUITE_P(ClientModes, LoadgenLosesServerTest,
                         ::testing::ValuesIn(kClientModes), ModeName);

class LoadgenPacingTest : public LoadgenTest,
                          public ::testing::WithParamInterface<ClientMode> {
 protected:
  // kSessions sessions, one round of `steps` steps each, at `rate` steps/s
  // over all of them; the JSON report.
  LoadgenRun RunPaced(int steps, double rate) {
    // A flag given twice takes its last value.
    std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
    args.insert(args.end(),
                {absl::StrCat("--sessions=", kSessions),
                 absl::StrCat("--steps_per_round=", steps),
                 absl::StrCat("--rate=", rate), "--mode=entrokv", "--json"});
    args.insert(args.end(), GetParam().flags.begin(), GetParam().flags.end());
    return RunLoadgen(args);
  }
};

// --rate is steps/s over all sessions, whatever the batch: 2 sessions x 50
// steps at 200 steps/s take about 0.5 s (a batch of 2 paced per message
// took half as long, at twice the rate).
TEST_P(LoadgenPacingTest, RateCountsStepsOverAllSessions) {
  StartServer();
  ASSERT_FALSE(HasFatalFailure());
  const LoadgenRun run = RunPaced(50, 200);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(JsonInt(run.output, "OK"), kSessions * 50) << run.output;
  // Pacing never runs ahead: the last steps are due 0.5 s in. A slow machine
  // may run behind, so the lower bound is loose.
  const double steps_per_s = JsonDouble(run.output, "steps_per_s");
  EXPECT_LE(steps_per_s, 200 * 1.1) << run.output;
  EXPECT_GE(steps_per_s, 200 * 0.3) << run.output;
}

// Open loop, latency runs from a step's (a message's) scheduled time, so
// that queueing counts: at a rate no server keeps up with, every message is
// due at once, and the last one answered has waited about as long as the
// whole phase took.
TEST_P(LoadgenPacingTest, OpenLoopLatencyCountsTheQueue) {
  StartServer();
  ASSERT_FALSE(HasFatalFailure());
  const LoadgenRun run = RunPaced(200, 1e9);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const double max_us = JsonDouble(run.output, "max");
  const double wall_us = JsonDouble(run.output, "wall_s") * 1e6;
  EXPECT_GE(max_us, 0.5 * wall_us) << run.output;
}

INSTANTIATE_TEST_SUITE_P(ClientModes, LoadgenPacingTest,
                         ::testing::ValuesIn(kClientModes), ModeName);

}  // namespace
}  // namespace entrokv::server::testing
