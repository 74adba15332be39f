// What a binary was built from: the project version, the git commit and the
// build type, fixed when CMake configured the build tree (a new commit
// re-runs the configure; see common/CMakeLists.txt). --version prints them
// and the server's metrics page exports them as entrokv_build_info.
//
// Thread-safety: constants; safe from any thread.

#ifndef ENTROKV_COMMON_BUILD_INFO_H_
#define ENTROKV_COMMON_BUILD_INFO_H_

#include <string>

#include "absl/strings/string_view.h"

namespace entrokv {

// The project version of CMake's project() ("0.1.0").
absl::string_view BuildVersion();
// The abbreviated commit hash, with "-dirty" when tracked files differed
// from it at configure time; "unknown" outside a git checkout.
absl::string_view BuildCommit();
// CMAKE_BUILD_TYPE ("Release", "RelWithDebInfo", ...), "" when unset.
absl::string_view BuildType();
// Whether the CUDA backend was compiled in (it may still find no device).
bool BuildHasCuda();

// The --version text of `program`, one fact per line:
//   entrokv-server 0.1.0
//   commit 6776b48c0a1e
//   build type RelWithDebInfo, CUDA backend compiled in
std::string VersionText(absl::string_view program);

}  // namespace entrokv

#endif  // ENTROKV_COMMON_BUILD_INFO_H_
