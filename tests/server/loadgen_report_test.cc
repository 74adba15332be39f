// entrokv-loadgen's report against an in-process server: the server
// process's CPU and context switches per step, the load generator's own CPU
// per step, the --shape=8b preset, the
// table of shadow policies, and a token-protected server.

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loadgen_test_util.h"
#include "server_process.h"
#include "server_test_util.h"

namespace entrokv::server::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class LoadgenReportTest : public ServerTest {};

// User + system CPU of this process (RUSAGE_SELF, every thread) or of its
// children waited for (RUSAGE_CHILDREN: the load generator, and the shell
// and timeout that start it).
double CpuSeconds(int who) {
  rusage usage{};
  getrusage(who, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}
double ProcessCpuSeconds() { return CpuSeconds(RUSAGE_SELF); }

// On a unix: target the report gives the server process's CPU and context
// switches per step (its pid from the socket's peer: here this test's own
// process, which serves in process); --server_pid=-1 and a TCP target
// without --server_pid give none.
TEST_F(LoadgenReportTest, ReportsTheServerProcessPerStepOnAUnixTarget) {
  const std::string socket =
      absl::StrCat("/tmp/entrokv-test-", getpid(), "-process.sock");
  ServerOptions options = TestServerOptions();
  options.listen = {absl::StrCat("unix:", socket)};
  StartServer(options);
  ASSERT_FALSE(HasFatalFailure());
  std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
  args.push_back("--mode=entrokv");
  args.push_back("--steps_per_round=2000");
  args.push_back("--json");
  const double cpu_before = ProcessCpuSeconds();
  const double children_before = CpuSeconds(RUSAGE_CHILDREN);
  const LoadgenRun run = RunLoadgen(args);
  const double cpu_during = ProcessCpuSeconds() - cpu_before;
  const double children_during = CpuSeconds(RUSAGE_CHILDREN) - children_before;
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // Each step is a round trip from another process: the thread that reads
  // it has waited for it, one switch at least.
  EXPECT_GE(JsonDouble(run.output, "context_switches_per_step"), 0.5)
      << run.output;
  // 2000 steps take several 10 ms clock ticks of server CPU (400 could
  // fit in one tick now that a step costs ~30 us outside compute), and no
  // more than this process (the server) spent over the whole run, counted
  // here with getrusage, plus a tick of each of the two readings.
  const double per_step = JsonDouble(run.output, "server_cpu_us_per_step");
  EXPECT_GT(per_step, 0.0) << run.output;
  EXPECT_LE(per_step * 2000 * 1e-6, cpu_during + 0.02) << run.output;
  // The load generator's own CPU in its phases: some, and no more than the
  // whole process took, setup and exit included (its clock is exact to
  // the nanosecond; getrusage to the microsecond).
  const double own = JsonDouble(run.output, "loadgen_cpu_us_per_step");
  EXPECT_GT(own, 0.0) << run.output;
  EXPECT_LE(own * 2000 * 1e-6, children_during + 1e-4) << run.output;
  EXPECT_THAT(run.output, Not(HasSubstr("\"loadgen_cpu_us_per_step\": null")));

  args.push_back("--server_pid=-1");
  const LoadgenRun off = RunLoadgen(args);
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_THAT(off.output, HasSubstr("\"server_cpu_us_per_step\": null"));
  // Its own CPU does not need the server's pid.
  EXPECT_GT(JsonDouble(off.output, "loadgen_cpu_us_per_step"), 0.0)
      << off.output;
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
TEST_F(LoadgenReportTest, TheEightBPresetYieldsToExplicitFlags) {
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
TEST_F(LoadgenReportTest, ReportsEachShadowPolicysRecallBesideTheSession) {
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

// A server that requires a bearer token: without --auth_token_file nothing
// is served (UNAUTHENTICATED, counted, exit 0); with it, every step is, in
// each client mode.
TEST_F(LoadgenReportTest, ReachesATokenServerWithAuthTokenFile) {
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

TEST(SwitchesSinceTest, CountsGrowthNewThreadsAndReusedIds) {
  loadgen::ProcessSample before, after;
  before.switches_by_thread = {{10, 5}, {11, 7}, {12, 100}, {13, 40}};
  // 10 grew by 3; 11 did not move; 12 exited (its last switches are lost);
  // 13 is a new thread under a reused id (below its old count: all new);
  // 14 is new.
  after.switches_by_thread = {{10, 8}, {11, 7}, {13, 6}, {14, 9}};
  EXPECT_EQ(loadgen::SwitchesSince(before, after), 3 + 0 + 6 + 9);
  EXPECT_EQ(loadgen::SwitchesSince(after, after), 0);
}

}  // namespace
}  // namespace entrokv::server::testing
