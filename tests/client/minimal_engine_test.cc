// The example engine (client/examples/minimal_engine.cc), run as its own
// process against an in-process server, as an engine integrator would run it.

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "client_test_util.h"
#include "entrokv/client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

// Runs `command`; its exit status and stdout.
int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) *output += buffer;
  return pclose(pipe);
}

TEST(MinimalEngineTest, RunsAgainstTheServerAndFreesWhatItIsTold) {
  auto server = testing::StartTestServer();
  ASSERT_NE(server, nullptr);
  std::string output;
  const int status = RunCommand(
      absl::StrCat(ENTROKV_MINIMAL_ENGINE, " ", server->targets()[0], " 300"),
      &output);
  ASSERT_EQ(status, 0) << output;
  long long steps = -1, from_server = -1, fallback = -1, budget = -1;
  int live = -1;
  ASSERT_EQ(std::sscanf(output.c_str(),
                        "steps=%lld server=%lld fallback=%lld live=%d "
                        "budget=%lld",
                        &steps, &from_server, &fallback, &live, &budget),
            5)
      << output;
  EXPECT_EQ(steps, 300);
  EXPECT_EQ(from_server, 300);
  EXPECT_EQ(fallback, 0);
  // The engine holds what the server left live: at most the entropy
  // controller's ceiling ceil(64 * (1 + 0.5)) = 96, and more than the
  // floor 1.
  EXPECT_GT(live, 1);
  EXPECT_LE(live, 96);
  // It closed its session on the way out.
  ClientOptions options;
  options.target = server->targets()[0];
  ASSERT_OK_AND_ASSIGN(auto client, Client::Connect(options));
  ASSERT_OK_AND_ASSIGN(auto sessions, client->ListSessions());
  EXPECT_TRUE(sessions.empty());
}

TEST(MinimalEngineTest, KeepsDecodingWhenTheSidecarIsAbsent) {
  std::string output;
  const int status = RunCommand(
      absl::StrCat(ENTROKV_MINIMAL_ENGINE,
                   " unix:/tmp/entrokv-minimal-engine-absent.sock 100"),
      &output);
  ASSERT_EQ(status, 0) << output;
  long long steps = -1, from_server = -1, fallback = -1, budget = -1;
  int live = -1;
  ASSERT_EQ(std::sscanf(output.c_str(),
                        "steps=%lld server=%lld fallback=%lld live=%d "
                        "budget=%lld",
                        &steps, &from_server, &fallback, &live, &budget),
            5)
      << output;
  EXPECT_EQ(fallback, 100);
  EXPECT_EQ(live, 64);  // The local streaming rule holds exactly the budget.
}

TEST(MinimalEngineTest, KeepsDecodingOfflineAtTheServersSessionLimit) {
  server::ServerOptions server_options = testing::TestServerOptions();
  server_options.max_sessions = 1;
  auto server = testing::StartTestServer(server_options);
  ASSERT_NE(server, nullptr);
  ClientOptions options;
  options.target = server->targets()[0];
  ASSERT_OK_AND_ASSIGN(auto client, Client::Connect(options));
  ASSERT_OK_AND_ASSIGN(auto holder,
                       client->CreateSession(testing::SmallConfig("tova", 4)));
  ASSERT_FALSE(holder->degraded());

  std::string output;
  const int status = RunCommand(
      absl::StrCat(ENTROKV_MINIMAL_ENGINE, " ", server->targets()[0], " 80"),
      &output);
  ASSERT_EQ(status, 0) << output;
  long long steps = -1, from_server = -1, fallback = -1, budget = -1;
  int live = -1;
  ASSERT_EQ(std::sscanf(output.c_str(),
                        "steps=%lld server=%lld fallback=%lld live=%d "
                        "budget=%lld",
                        &steps, &from_server, &fallback, &live, &budget),
            5)
      << output;
  EXPECT_EQ(steps, 80);
  EXPECT_EQ(fallback, 80);
  EXPECT_EQ(live, 64);
  // It says that it ran offline, and why.
  EXPECT_THAT(output, ::testing::HasSubstr("offline: RESOURCE_EXHAUSTED"));
}

}  // namespace
}  // namespace entrokv
