#include "common/build_info.h"

#include "absl/strings/str_cat.h"

namespace entrokv {

absl::string_view BuildVersion() { return ENTROKV_BUILD_VERSION; }
absl::string_view BuildCommit() { return ENTROKV_BUILD_COMMIT; }
absl::string_view BuildType() { return ENTROKV_BUILD_TYPE; }
bool BuildHasCuda() { return ENTROKV_BUILD_CUDA != 0; }

std::string VersionText(absl::string_view program) {
  return absl::StrCat(program, " ", BuildVersion(), "\ncommit ", BuildCommit(),
                      "\nbuild type ",
                      BuildType().empty() ? "(none)" : BuildType(),
                      BuildHasCuda() ? ", CUDA backend compiled in"
                                     : ", no CUDA backend",
                      "\n");
}

}  // namespace entrokv
