// The client library's reading of its environment variables (internal).

#ifndef ENTROKV_CLIENT_SRC_ENVIRONMENT_H_
#define ENTROKV_CLIENT_SRC_ENVIRONMENT_H_

#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace entrokv::client_internal {

// ENTROKV_STEP_DEADLINE_MS: nullopt when unset or empty. Errors:
// InvalidArgument for a value that is not a positive number.
absl::StatusOr<std::optional<absl::Duration>> StepDeadlineFromEnvironment();

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_ENVIRONMENT_H_
