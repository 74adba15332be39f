// Every binary's --help lists its own flags, says how to use ENTROKV_*
// environment variables, and prints no build path (issue #11).

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// stdout and stderr of `command`, and its exit status in `status`.
std::string RunCommand(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    out.append(buffer, n);
  }
  const int raw = pclose(pipe);
  *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

struct Binary {
  const char* path;
  const char* own_file;
  std::vector<const char*> flags;
};

class HelpTest : public ::testing::TestWithParam<Binary> {};

TEST_P(HelpTest, ListsOwnFlagsAndEnvironmentWithoutBuildPaths) {
  const Binary& binary = GetParam();
  int status = 0;
  const std::string text =
      RunCommand(absl::StrCat(binary.path, " --help"), &status);
  EXPECT_EQ(status, 1) << text;  // Abseil's --help exits 1.
  EXPECT_THAT(text, HasSubstr(absl::StrCat("Flags from ", binary.own_file)));
  for (const char* flag : binary.flags) EXPECT_THAT(text, HasSubstr(flag));
  EXPECT_THAT(text, HasSubstr("ENTROKV_<FLAG_NAME_UPPERCASE>"));
  EXPECT_THAT(text, Not(HasSubstr(ENTROKV_SOURCE_ROOT)));
  EXPECT_THAT(text, Not(HasSubstr("Flags from ../")));
  EXPECT_THAT(text, Not(HasSubstr("Flags from /")));
  EXPECT_THAT(text, Not(HasSubstr("/build/")));
}

std::vector<Binary> Binaries() {
  std::vector<Binary> binaries = {
      {ENTROKV_SERVER_BINARY,
       "server/main.cc",
       {"--listen", "--health_listen", "--tls_cert", "--tls_client_ca",
        "--auth_token_file", "--allow_insecure_tcp", "--socket_mode",
        "--log_format", "--max_sessions"}},
  };
#ifdef ENTROKV_LOADGEN_BINARY
  binaries.push_back(
      {ENTROKV_LOADGEN_BINARY, "client/loadgen/", {"--target", "--sessions"}});
#endif
#ifdef ENTROKV_EVAL_BINARY
  binaries.push_back({ENTROKV_EVAL_BINARY,
                      "client/examples/tinyllama/eval_main.cc",
                      {"--inprocess", "--budgets"}});
#endif
  return binaries;
}

INSTANTIATE_TEST_SUITE_P(Binaries, HelpTest, ::testing::ValuesIn(Binaries()));

// The environment reaches a real binary: ENTROKV_LOG_FORMAT=json makes its
// lines JSON, and a bad ENTROKV_ value is named on exit 2.
TEST(EnvironmentTest, ServerTakesFlagsFromEnvironment) {
  int status = 0;
  const std::string text = RunCommand(
      absl::StrCat("ENTROKV_LOG_FORMAT=json ENTROKV_GPU=false "
                   "ENTROKV_LISTEN=unix:/tmp/entrokv-help-test-no-dir/s "
                   "ENTROKV_LOG_LEVEL=info ",
                   ENTROKV_SERVER_BINARY),
      &status);
  EXPECT_EQ(status, 1) << text;
  // The startup failure, logged as one JSON object naming the directory.
  EXPECT_THAT(text, HasSubstr("{\"ts\":\""));
  EXPECT_THAT(text, HasSubstr("\"level\":\"critical\""));
  EXPECT_THAT(text, HasSubstr("ENOENT on /tmp/entrokv-help-test-no-dir"));
  // The command line wins: text format.
  const std::string text2 =
      RunCommand(absl::StrCat("ENTROKV_LOG_FORMAT=json ", ENTROKV_SERVER_BINARY,
                              " --gpu=false --log_format=text "
                              "--listen=unix:/tmp/entrokv-help-test-no-dir/s"),
                 &status);
  EXPECT_THAT(text2, Not(HasSubstr("{\"ts\":\"")));
  EXPECT_THAT(text2, HasSubstr("[critical]"));
  const std::string bad = RunCommand(
      absl::StrCat("ENTROKV_MAX_SESSIONS=many ", ENTROKV_SERVER_BINARY),
      &status);
  EXPECT_EQ(status, 2);
  EXPECT_THAT(bad, HasSubstr("ENTROKV_MAX_SESSIONS=\"many\""));
}

}  // namespace
