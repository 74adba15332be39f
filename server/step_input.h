// The wire's SessionStep as core's StepInput: what the server checks before
// core sees a step. Shared by DecodeReactor (server/service.cc) and the wire
// fuzzer (tests/fuzz/fuzz_step.cc), so that the fuzzer runs the server's own
// conversion. Header-only: the fuzzer does not link the gRPC server.

#ifndef ENTROKV_SERVER_STEP_INPUT_H_
#define ENTROKV_SERVER_STEP_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "entrokv/core/session.h"
#include "entrokv/v1/entrokv.pb.h"

namespace entrokv::server {

static_assert(sizeof(bool) == 1, "pinned flags are read as bytes");

inline constexpr uint64_t kLastStepNumber =
    std::numeric_limits<uint64_t>::max();

// Fills `input` from `step` (its spans view `step`'s fields, which must
// outlive it). `last_step`: the session's last accepted step number, nullopt
// before its first. Errors: InvalidArgument or FailedPrecondition for what
// the server refuses before core sees the step.
inline absl::Status ToStepInput(const v1::SessionStep& step,
                                std::optional<uint64_t> last_step,
                                StepInput* input) {
  // No number follows 2^64-1: a session that started there could never step
  // again, and one that reached it has used its numbers up.
  if (!last_step.has_value() && step.step() == kLastStepNumber) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step: ", kLastStepNumber,
        " (2^64-1) cannot be a session's first step: no step number could "
        "follow it; start below it"));
  }
  if (last_step.has_value() && *last_step == kLastStepNumber) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step: the session's last step was ", kLastStepNumber,
        " (2^64-1), so its step numbers are used up; close it and open a "
        "new session"));
  }

  input->step = step.step();
  const v1::Append& append = step.append();
  input->append.slot_ids =
      absl::MakeConstSpan(append.slot_ids().data(), append.slot_ids_size());
  input->append.pinned = absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(append.pinned().data()),
      append.pinned_size());
  input->append.keys = absl::MakeConstSpan(
      reinterpret_cast<const std::byte*>(append.keys().data()),
      append.keys().size());
  input->queries = absl::MakeConstSpan(
      reinterpret_cast<const std::byte*>(step.queries().data()),
      step.queries().size());
  switch (step.entropy_source_case()) {
    case v1::SessionStep::kEntropy:
      input->entropy = step.entropy();
      break;
    case v1::SessionStep::kLogits:
      if (step.logits().values_size() == 0) {
        return absl::InvalidArgumentError("logits: empty");
      }
      input->logits = absl::MakeConstSpan(step.logits().values().data(),
                                          step.logits().values_size());
      break;
    case v1::SessionStep::ENTROPY_SOURCE_NOT_SET:
      break;
  }
  return absl::OkStatus();
}

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_STEP_INPUT_H_
