#include "common/flags.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/build_info.h"

namespace entrokv {
namespace {

constexpr absl::string_view kSourceRoot = ENTROKV_SOURCE_ROOT;

constexpr absl::string_view kEnvironmentNote =
    "Every flag can also be set from the environment as "
    "ENTROKV_<FLAG_NAME_UPPERCASE>\n(e.g. ENTROKV_LOG_LEVEL=debug for "
    "--log_level); a flag given on the command line wins.\n"
    "A bad command line (unknown flag, unparseable or rejected value) "
    "exits 2.";

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
  if (absl::StartsWith(path, "common/")) return true;
  for (const std::string& dir : SourceDirs()) {
    if (absl::StartsWith(path, dir)) return true;
  }
  return false;
}

// Abseil 20220623 ends the program with std::exit(1) from inside
// ParseCommandLine on an unknown flag or a value it cannot parse (after
// printing why on stderr), and offers no way to change the code. While
// ParseFlags() parses, this exit handler turns that exit into exit 2, the
// documented code for a bad command line. Usage flags are not handled inside
// the parse (kIgnoreUsage), so nothing else exits there.
std::atomic<bool> parsing{false};
std::string* program_name = nullptr;

void ExitTwoIfParseFailed() {
  if (!parsing.load()) return;
  std::cout.flush();
  std::fprintf(stderr, "%s: bad command line (see --help)\n",
               program_name != nullptr ? program_name->c_str() : "entrokv");
  std::fflush(stderr);
  std::_Exit(2);
}

std::string Basename(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == absl::string_view::npos ? path
                                                      : path.substr(slash + 1));
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

std::string HelpText(absl::string_view program, const ProgramInfo& info) {
  std::ostringstream out;
  out << program << ": " << info.usage << "\n\n" << kEnvironmentNote << "\n";
  const absl::flat_hash_map<absl::string_view, absl::CommandLineFlag*> flags =
      absl::GetAllFlags();
  std::set<std::string> listed;
  for (const FlagGroup& group : info.groups) {
    out << "\n" << group.title << ":\n";
    for (const std::string& name : group.flags) {
      const auto it = flags.find(name);
      if (it == flags.end()) continue;
      absl::flags_internal::FlagHelp(out, *it->second);
      listed.insert(name);
    }
  }
  // Flags of the program's folders that no group names, sorted.
  std::set<std::string> other;
  for (const auto& [name, flag] : flags) {
    if (!IsAbseilFlag(*flag) && IsOwnFlagFile(flag->Filename()) &&
        listed.count(std::string(name)) == 0) {
      other.insert(std::string(name));
    }
  }
  if (!other.empty()) {
    out << "\nOther:\n";
    for (const std::string& name : other) {
      absl::flags_internal::FlagHelp(out, *flags.at(name));
    }
  }
  out << "\nHelp:\n"
         "    --help: this text; --helpfull: every flag, Abseil's too; "
         "--version:\n      the version, commit and build type.\n";
  return out.str();
}

std::vector<char*> ParseFlags(int argc, char** argv, const ProgramInfo& info) {
  SourceDirs() = info.source_dirs;
  program_name = new std::string(Basename(argc > 0 ? argv[0] : "entrokv"));
  absl::SetProgramUsageMessage(
      absl::StrCat(info.usage, "\n\n", kEnvironmentNote));
  absl::FlagsUsageConfig config;
  config.contains_help_flags = &IsOwnFlagFile;
  config.contains_helpshort_flags = &IsOwnFlagFile;
  config.normalize_filename = &NormalizeSourcePath;
  config.version_string = [] { return VersionText(*program_name); };
  absl::SetFlagsUsageConfig(config);
  std::string error;
  if (!ApplyFlagsFromEnvironment(&error)) {
    std::fprintf(stderr, "%s: %s\n", program_name->c_str(), error.c_str());
    std::exit(2);
  }

  std::atexit(&ExitTwoIfParseFailed);
  parsing.store(true);
  std::vector<char*> rest = absl::flags_internal::ParseCommandLineImpl(
      argc, argv, absl::flags_internal::ArgvListAction::kRemoveParsedArgs,
      absl::flags_internal::UsageFlagsAction::kIgnoreUsage,
      absl::flags_internal::OnUndefinedFlag::kAbortIfUndefined);
  parsing.store(false);

  using absl::flags_internal::HelpMode;
  switch (absl::flags_internal::GetFlagsHelpMode()) {
    case HelpMode::kNone:
      break;
    case HelpMode::kImportant:
    case HelpMode::kShort:
      std::fputs(HelpText(*program_name, info).c_str(), stdout);
      std::exit(0);
    case HelpMode::kVersion:
      std::fputs(VersionText(*program_name).c_str(), stdout);
      std::exit(0);
    default:  // --helpfull, --help=SUBSTRING, --helppackage, --only_check_args
      absl::flags_internal::HandleUsageFlags(std::cout,
                                             absl::ProgramUsageMessage());
      std::cout.flush();
      std::exit(0);
  }
  if (!info.positional_arguments && rest.size() > 1) {
    std::fprintf(stderr,
                 "%s: unexpected argument '%s': flags are --name=value (see "
                 "--help)\n",
                 program_name->c_str(), rest[1]);
    std::exit(2);
  }
  return rest;
}

}  // namespace entrokv
