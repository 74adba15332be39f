// Every binary's command line keeps its word (issues #11 and #23): --help
// lists its own flags by topic on stdout and exits 0, --version names the
// version, commit and build type, every flag the help names exists, and bad
// input exits 2 with a message.

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The output of `command` (stdout, or stdout and stderr together), and its
// exit status in `status`.
std::string RunCommand(const std::string& command, int* status,
                       bool with_stderr = true) {
  std::string out;
  FILE* pipe =
      popen((command + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
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
  const char* name;
  std::vector<const char*> groups;  // Topics of --help, in order.
  std::vector<const char*> flags;
  const char* bool_flag;  // One of its boolean flags.
  // Values that parse but that the program refuses, and what it says.
  std::vector<std::pair<const char*, const char*>> rejected;
};

class HelpTest : public ::testing::TestWithParam<Binary> {
 protected:
  // Runs the binary with `args`; returns its output, sets status_.
  std::string Run(const std::string& args, bool with_stderr = true) {
    return RunCommand(absl::StrCat(GetParam().path, " ", args), &status_,
                      with_stderr);
  }
  int status_ = -1;
};

TEST_P(HelpTest, HelpGoesToStdoutByTopicAndExitsZero) {
  const Binary& binary = GetParam();
  const std::string text = Run("--help", /*with_stderr=*/false);
  EXPECT_EQ(status_, 0) << text;
  size_t last = 0;
  for (const char* group : binary.groups) {
    const size_t at = text.find(absl::StrCat("\n", group, ":\n"));
    ASSERT_NE(at, std::string::npos) << group << "\n" << text;
    EXPECT_GT(at, last) << group << " out of order";
    last = at;
  }
  for (const char* flag : binary.flags) EXPECT_THAT(text, HasSubstr(flag));
  EXPECT_THAT(text, HasSubstr("ENTROKV_<FLAG_NAME_UPPERCASE>"));
  EXPECT_THAT(text, HasSubstr("--log_level"));
  // Every flag of the program is in a topic, and no source path is shown.
  EXPECT_THAT(text, Not(HasSubstr("\nOther:\n")));
  EXPECT_THAT(text, Not(HasSubstr("Flags from")));
  EXPECT_THAT(text, Not(HasSubstr(ENTROKV_SOURCE_ROOT)));
  EXPECT_THAT(text, Not(HasSubstr("/build/")));
  // Nothing on stderr.
  EXPECT_EQ(Run("--help 2>&1 >/dev/null"), "");
  // Abseil's full listing also exits 0.
  EXPECT_THAT(Run("--helpfull", false), HasSubstr("--flagfile"));
  EXPECT_EQ(status_, 0);
}

// The commit at HEAD of the source tree, by git itself; "" without git.
std::string GitHead() {
  int status = -1;
  std::string head =
      RunCommand(absl::StrCat("git -C ", ENTROKV_SOURCE_ROOT,
                              " rev-parse --short=12 HEAD"),
                 &status, false);
  if (status != 0) return "";
  while (!head.empty() && head.back() == '\n') head.pop_back();
  return head;
}

TEST_P(HelpTest, VersionNamesVersionCommitAndBuildType) {
  const std::string text = Run("--version", false);
  EXPECT_EQ(status_, 0) << text;
  EXPECT_THAT(text, StartsWith(absl::StrCat(GetParam().name, " ",
                                            ENTROKV_EXPECTED_VERSION, "\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("\nbuild type ",
                                           ENTROKV_EXPECTED_BUILD_TYPE)));
  EXPECT_THAT(text, Not(HasSubstr("NDEBUG")));
  const std::string head = GitHead();
  if (head.empty()) GTEST_SKIP() << "no git checkout to compare the commit";
  EXPECT_THAT(text, HasSubstr(absl::StrCat("\ncommit ", head)));
}

// Every kind of bad input exits 2 and says what was wrong.
TEST_P(HelpTest, BadInputExitsTwoWithAMessage) {
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--no_such_flag", "Unknown command line flag 'no_such_flag'"},
      {"--log_level", "Missing the value for the flag 'log_level'"},
      {absl::StrCat("--", GetParam().bool_flag, "=perhaps"),
       "Illegal value 'perhaps'"},
      {"positional", "unexpected argument 'positional'"},
      {"--log_level=verbose", "--log_level: unknown level \"verbose\""},
  };
  std::vector<Case> all = cases;
  for (const auto& [args, message] : GetParam().rejected) {
    all.push_back({args, message});
  }
  for (const Case& c : all) {
    const std::string text = Run(c.args);
    EXPECT_EQ(status_, 2) << c.args << "\n" << text;
    EXPECT_THAT(text, HasSubstr(c.message)) << c.args;
  }
  const std::string text = RunCommand(
      absl::StrCat("ENTROKV_LOG_LEVEL=loud ", GetParam().path), &status_);
  EXPECT_EQ(status_, 2) << text;
  EXPECT_THAT(text, HasSubstr("unknown level \"loud\""));
}

// --log_level (and ENTROKV_LOG_LEVEL), which the help promises, is a flag of
// every binary: a valid level parses (then --version exits 0).
TEST_P(HelpTest, TakesLogLevel) {
  const std::string text = Run("--log_level=debug --version");
  EXPECT_EQ(status_, 0) << text;
  EXPECT_THAT(text, Not(HasSubstr("Unknown command line flag")));
}

std::vector<Binary> Binaries() {
  std::vector<Binary> binaries = {
      {ENTROKV_SERVER_BINARY,
       "entrokv-server",
       {"Listening", "Security (docs/security.md)", "Limits", "Lifetimes",
        "Backend", "Logging"},
       {"--listen", "--health_listen", "--tls_cert", "--tls_client_ca",
        "--auth_token_file", "--allow_insecure_tcp", "--socket_mode",
        "--log_format", "--max_sessions"},
       "gpu",
       {{"--poll_threads=0", "poll_threads: must be in [1, 1024]"},
        {"--listen=127.0.0.1:99999", "needs a decimal port in [0, 65535]"},
        {"--tls_cert=/nonexistent", "tls_cert and tls_key: give both"}}},
  };
#ifdef ENTROKV_LOADGEN_BINARY
  binaries.push_back(
      {ENTROKV_LOADGEN_BINARY,
       "entrokv-loadgen",
       {"Server", "Load", "Session shape and policy", "Deadlines", "Output"},
       {"--target", "--sessions", "--duration"},
       "json",
       {{"--sessions=0", "--sessions 0: must be at least 1"},
        {"--prefill=-1", "--prefill -1: must be at least 0"},
        {"--rate=-5", "--rate -5: must be a finite number"}}});
#endif
#ifdef ENTROKV_EVAL_BINARY
  binaries.push_back(
      {ENTROKV_EVAL_BINARY,
       "entrokv-eval",
       {"Decider", "Data", "Protocol (the default run)", "Sweep and fidelity",
        "Policies and scoring variant", "Output"},
       {"--inprocess", "--budgets"},
       "plot",
       {{"--budgets=-5", "--budgets: '-5' is not a positive"}}});
#endif
  return binaries;
}

INSTANTIATE_TEST_SUITE_P(
    Binaries, HelpTest, ::testing::ValuesIn(Binaries()),
    [](const ::testing::TestParamInfo<Binary>& info) {
      std::string name = info.param.name;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

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
  EXPECT_EQ(status, 1) << text;  // Cannot start: not a command-line error.
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
