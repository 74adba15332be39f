// Defaults read from the environment (client.h: DefaultTarget; session.h:
// DefaultStepDeadline), as the deployment manifests set them for the engine.

#include "environment.h"

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"

namespace entrokv {

std::string DefaultTarget() {
  const char* value = std::getenv("ENTROKV_TARGET");
  if (value == nullptr || *value == '\0') return kDefaultTarget;
  return value;
}

absl::Duration DefaultStepDeadline() {
  absl::StatusOr<std::optional<absl::Duration>> value =
      client_internal::StepDeadlineFromEnvironment();
  if (!value.ok() || !value->has_value()) return absl::Milliseconds(100);
  return **value;
}

namespace client_internal {

absl::StatusOr<std::optional<absl::Duration>> StepDeadlineFromEnvironment() {
  const char* value = std::getenv("ENTROKV_STEP_DEADLINE_MS");
  if (value == nullptr || *value == '\0') return std::nullopt;
  double ms = 0;
  // At least 1 us: a smaller value would truncate to a zero deadline.
  if (!absl::SimpleAtod(value, &ms) || !(ms >= 0.001) || ms > 1e12) {
    return absl::InvalidArgumentError(
        std::string("ENTROKV_STEP_DEADLINE_MS: \"") + value +
        "\" is not a number of milliseconds from 0.001 to 1e12");
  }
  return absl::Microseconds(static_cast<int64_t>(ms * 1000));
}

}  // namespace client_internal
}  // namespace entrokv
