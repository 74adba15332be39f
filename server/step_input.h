// The wire's SessionStep as core's StepInput: what the server checks before
// core sees a step. Shared by DecodeStream (server/decode_stream.cc) and the wire
// fuzzer (tests/fuzz/fuzz_step.cc), so that the fuzzer runs the server's own
// conversion. Header-only: the fuzzer does not link the gRPC server.

#ifndef ENTROKV_SERVER_STEP_INPUT_H_
#define ENTROKV_SERVER_STEP_INPUT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "entrokv/core/session.h"
#include "entrokv/v1/entrokv.pb.h"

namespace entrokv::server {

static_assert(sizeof(bool) == 1, "pinned flags are read as bytes");

// Fills `input` from `step` (its spans view `step`'s fields, which must
// outlive it). Errors: InvalidArgument for what the server refuses before
// core sees the step. (Step numbers, 2^64-1 included, are core's to check.)
inline absl::Status ToStepInput(const v1::SessionStep& step,
                                StepInput* input) {
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
