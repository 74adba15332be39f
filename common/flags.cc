#include "common/flags.h"

#include <cstdio>
#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace entrokv {
namespace {

constexpr absl::string_view kSourceRoot = ENTROKV_SOURCE_ROOT;

// Abseil's own flags (--flagfile, --fromenv, --help, ...) keep their meaning
// and take no ENTROKV_ variable.
bool IsAbseilFlag(const absl::CommandLineFlag& flag) {
  return absl::StrContains(flag.Filename(), "absl/");
}

// The program's source folders, kept for the usage callbacks (which are
// plain functions of a file name).
std::vector<std::string>& SourceDirs() {
  static auto* dirs = new std::vector<std::string>();
  return *dirs;
}

bool IsOwnFlagFile(absl::string_view filename) {
  const std::string path = NormalizeSourcePath(filename);
  for (const std::string& dir : SourceDirs()) {
    if (absl::StartsWith(path, dir)) return true;
  }
  return false;
}

}  // namespace

std::string FlagEnvironmentName(absl::string_view flag_name) {
  return absl::StrCat("ENTROKV_", absl::AsciiStrToUpper(flag_name));
}

std::string NormalizeSourcePath(absl::string_view path) {
  if (absl::ConsumePrefix(&path, kSourceRoot)) return std::string(path);
  while (absl::ConsumePrefix(&path, "../") ||
         absl::ConsumePrefix(&path, "./")) {
  }
  // A library built elsewhere (Debian's Abseil): from its "absl/" on.
  if (const size_t absl_dir = path.find("/absl/");
      absl_dir != absl::string_view::npos) {
    path.remove_prefix(absl_dir + 1);
  }
  return std::string(path);
}

bool ApplyFlagsFromEnvironment(std::string* error) {
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsAbseilFlag(*flag)) continue;
    const std::string variable = FlagEnvironmentName(name);
    const char* value = std::getenv(variable.c_str());
    if (value == nullptr) continue;
    std::string why;
    if (!flag->ParseFrom(value, &why)) {
      *error = absl::StrCat(variable, "=\"", value, "\": ", why);
      return false;
    }
  }
  return true;
}

std::vector<char*> ParseFlags(int argc, char** argv, const ProgramInfo& info) {
  SourceDirs() = info.source_dirs;
  absl::SetProgramUsageMessage(absl::StrCat(
      info.usage,
      "\n\nEvery flag can also be set from the environment as "
      "ENTROKV_<FLAG_NAME_UPPERCASE>\n(e.g. ENTROKV_LOG_LEVEL=debug for "
      "--log_level); a flag given on the command line wins."));
  absl::FlagsUsageConfig config;
  config.contains_help_flags = &IsOwnFlagFile;
  config.contains_helpshort_flags = &IsOwnFlagFile;
  config.normalize_filename = &NormalizeSourcePath;
  absl::SetFlagsUsageConfig(config);
  std::string error;
  if (!ApplyFlagsFromEnvironment(&error)) {
    std::fprintf(stderr, "%s: %s\n", argc > 0 ? argv[0] : "entrokv",
                 error.c_str());
    std::exit(2);
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace entrokv
