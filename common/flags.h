// Command-line parsing shared by every entrokv binary (entrokv-server,
// entrokv-loadgen, entrokv-eval, entrokv-sim).
//
// ParseFlags() is absl::ParseCommandLine() with these differences:
//  - Every flag may also be set from the environment as
//    ENTROKV_<FLAG_NAME_UPPERCASE> (--max_sessions from ENTROKV_MAX_SESSIONS).
//    The environment is read first and the command line after it, so a flag
//    given on the command line wins. Abseil's own flags (--flagfile,
//    --fromenv, ...) are not mapped.
//  - Bad input exits 2: an unknown flag, a value a flag cannot parse (on
//    the command line or in an ENTROKV_ variable), and a positional argument
//    to a program that takes none. Abseil alone exits 1.
//  - --help (and --helpshort) print the program's own flags grouped by
//    topic (ProgramInfo::groups) to stdout and exit 0; --helpfull, --help=
//    SUBSTRING and --helppackage print Abseil's listings, also exit 0.
//  - --version prints VersionText() (version, commit, build type) and
//    exits 0.
//
// Thread-safety: call once, from main, before any other thread exists.

#ifndef ENTROKV_COMMON_FLAGS_H_
#define ENTROKV_COMMON_FLAGS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace entrokv {

// A topic of --help: a title and the names of its flags, in order.
struct FlagGroup {
  std::string title;
  std::vector<std::string> flags;
};

struct ProgramInfo {
  // What the program does and how to call it (absl::SetProgramUsageMessage).
  std::string usage;
  // Folders, relative to the repository root and ending in '/'
  // ("server/", "tools/loadgen/"), that define the program's own flags.
  // "common/" (the shared --log_level) is always one of them. A flag of
  // these folders that no group names is listed under "Other".
  std::vector<std::string> source_dirs;
  // The topics of --help, in order.
  std::vector<FlagGroup> groups;
  // Whether the program takes positional arguments; if not, one is an error.
  bool positional_arguments = false;
};

// The name of the environment variable that sets `flag_name`:
// "max_sessions" -> "ENTROKV_MAX_SESSIONS".
std::string FlagEnvironmentName(absl::string_view flag_name);

// `path` (a source file name as __FILE__ gave it to Abseil) relative to the
// repository root: "/work/x/server/main.cc" -> "server/main.cc",
// "../../tools/loadgen/loadgen_main.cc" -> "tools/loadgen/loadgen_main.cc".
std::string NormalizeSourcePath(absl::string_view path);

// Applies ENTROKV_* environment variables, then parses argv (see above).
// Returns the positional arguments, argv[0] first, as absl::ParseCommandLine.
// Exits 0 after --help or --version, 2 on bad input.
// REQUIRES: called once, before any flag is read.
std::vector<char*> ParseFlags(int argc, char** argv, const ProgramInfo& info);

// The environment half of ParseFlags(): sets every mapped flag whose
// ENTROKV_ variable is set in the environment. Returns false, with `error`
// naming the variable, on the first value a flag rejects. Exposed for tests.
bool ApplyFlagsFromEnvironment(std::string* error);

// The text of --help for `info`, as ParseFlags() prints it. Exposed for
// tests.
std::string HelpText(absl::string_view program, const ProgramInfo& info);

}  // namespace entrokv

#endif  // ENTROKV_COMMON_FLAGS_H_
