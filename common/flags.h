// Command-line parsing shared by every entrokv binary (entrokv-server,
// entrokv-loadgen, entrokv-eval).
//
// ParseFlags() is absl::ParseCommandLine() with two additions:
//  - Every flag may also be set from the environment as
//    ENTROKV_<FLAG_NAME_UPPERCASE> (--max_sessions from ENTROKV_MAX_SESSIONS).
//    The environment is read first and the command line after it, so a flag
//    given on the command line wins. An environment value the flag cannot
//    parse ends the program (exit 2) with a message naming the variable.
//    Abseil's own flags (--flagfile, --fromenv, ...) are not mapped.
//  - --help and --helpshort list the flags defined in the program's own
//    source folders (ProgramInfo::source_dirs), with file names relative to
//    the repository root (no build paths), and the usage message says how to
//    use the environment.
//
// Thread-safety: call once, from main, before any other thread exists.

#ifndef ENTROKV_COMMON_FLAGS_H_
#define ENTROKV_COMMON_FLAGS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace entrokv {

struct ProgramInfo {
  // What the program does and how to call it (absl::SetProgramUsageMessage).
  std::string usage;
  // Folders, relative to the repository root and ending in '/'
  // ("server/", "client/loadgen/"), whose flags --help lists.
  std::vector<std::string> source_dirs;
};

// The name of the environment variable that sets `flag_name`:
// "max_sessions" -> "ENTROKV_MAX_SESSIONS".
std::string FlagEnvironmentName(absl::string_view flag_name);

// `path` (a source file name as __FILE__ gave it to Abseil) relative to the
// repository root: "/work/x/server/main.cc" -> "server/main.cc",
// "../../client/loadgen/loadgen_main.cc" -> "client/loadgen/loadgen_main.cc".
std::string NormalizeSourcePath(absl::string_view path);

// Applies ENTROKV_* environment variables, then parses argv (see above).
// Returns the positional arguments, argv[0] first, as absl::ParseCommandLine.
// REQUIRES: called once, before any flag is read.
std::vector<char*> ParseFlags(int argc, char** argv, const ProgramInfo& info);

// The environment half of ParseFlags(): sets every mapped flag whose
// ENTROKV_ variable is set in the environment. Returns false, with `error`
// naming the variable, on the first value a flag rejects. Exposed for tests.
bool ApplyFlagsFromEnvironment(std::string* error);

}  // namespace entrokv

#endif  // ENTROKV_COMMON_FLAGS_H_
