// common/flags: ENTROKV_<FLAG> environment variables (the command line wins)
// and the file names --help prints.

#include "common/flags.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int32_t, flags_test_number, 1, "A number for the test");
ABSL_FLAG(std::string, flags_test_word, "default", "A word for the test");
ABSL_FLAG(bool, flags_test_switch, false, "A switch for the test");

namespace entrokv {
namespace {

using ::testing::HasSubstr;

class FlagsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name :
         {"ENTROKV_FLAGS_TEST_NUMBER", "ENTROKV_FLAGS_TEST_WORD",
          "ENTROKV_FLAGS_TEST_SWITCH"}) {
      unsetenv(name);
    }
    absl::SetFlag(&FLAGS_flags_test_number, 1);
    absl::SetFlag(&FLAGS_flags_test_word, "default");
    absl::SetFlag(&FLAGS_flags_test_switch, false);
  }
};

TEST_F(FlagsTest, NamesTheVariableInUpperCase) {
  EXPECT_EQ(FlagEnvironmentName("max_sessions"), "ENTROKV_MAX_SESSIONS");
  EXPECT_EQ(FlagEnvironmentName("log_format"), "ENTROKV_LOG_FORMAT");
}

TEST_F(FlagsTest, EnvironmentOverridesTheDefault) {
  setenv("ENTROKV_FLAGS_TEST_NUMBER", "7", 1);
  setenv("ENTROKV_FLAGS_TEST_SWITCH", "true", 1);
  std::string error;
  ASSERT_TRUE(ApplyFlagsFromEnvironment(&error)) << error;
  EXPECT_EQ(absl::GetFlag(FLAGS_flags_test_number), 7);
  EXPECT_TRUE(absl::GetFlag(FLAGS_flags_test_switch));
  EXPECT_EQ(absl::GetFlag(FLAGS_flags_test_word), "default");  // Not set.
}

TEST_F(FlagsTest, BadEnvironmentValueNamesTheVariable) {
  setenv("ENTROKV_FLAGS_TEST_NUMBER", "seven", 1);
  std::string error;
  EXPECT_FALSE(ApplyFlagsFromEnvironment(&error));
  EXPECT_THAT(error, HasSubstr("ENTROKV_FLAGS_TEST_NUMBER=\"seven\""));
}

// ParseFlags once per process (it sets the usage configuration): the
// command line wins over the environment, the environment over the default.
TEST_F(FlagsTest, CommandLineBeatsEnvironment) {
  setenv("ENTROKV_FLAGS_TEST_NUMBER", "7", 1);
  setenv("ENTROKV_FLAGS_TEST_WORD", "from-env", 1);
  std::vector<std::string> args = {"flags_test", "--flags_test_number=9",
                                   "positional"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  const std::vector<char*> rest = ParseFlags(static_cast<int>(argv.size()),
                                             argv.data(), {.usage = "test", .source_dirs = {"tests/"}, .groups = {}, .positional_arguments = true});
  EXPECT_EQ(absl::GetFlag(FLAGS_flags_test_number), 9);
  EXPECT_EQ(absl::GetFlag(FLAGS_flags_test_word), "from-env");
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(std::string(rest[1]), "positional");
}

TEST_F(FlagsTest, SourcePathsAreRelativeToTheRepository) {
  EXPECT_EQ(NormalizeSourcePath("../server/main.cc"), "server/main.cc");
  EXPECT_EQ(NormalizeSourcePath("../../tools/loadgen/loadgen_main.cc"),
            "tools/loadgen/loadgen_main.cc");
  EXPECT_EQ(NormalizeSourcePath(ENTROKV_SOURCE_ROOT "server/main.cc"),
            "server/main.cc");
  EXPECT_EQ(NormalizeSourcePath("/build/abseil-cpp-x/absl/flags/parse.cc"),
            "absl/flags/parse.cc");
}

}  // namespace
}  // namespace entrokv
