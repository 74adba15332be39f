// Entropy of a next-token distribution, in nats.
//
// EntropyFromLogits computes H(softmax(logits)) with a stable log-sum-exp, so
// logits of ±1e4 neither overflow nor lose the distribution. Pure functions,
// thread-safe.

#ifndef ENTROKV_CORE_ENTROPY_H_
#define ENTROKV_CORE_ENTROPY_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace entrokv {

// InvalidArgument when `logits` is empty or holds a NaN or an infinity.
absl::StatusOr<double> EntropyFromLogits(absl::Span<const float> logits);

// OK when `entropy` is finite and >= 0; else InvalidArgument naming "entropy".
absl::Status ValidateEntropy(double entropy);

}  // namespace entrokv

#endif  // ENTROKV_CORE_ENTROPY_H_
