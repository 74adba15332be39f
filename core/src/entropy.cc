#include "entrokv/core/entropy.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace entrokv {

absl::StatusOr<double> EntropyFromLogits(absl::Span<const float> logits) {
  if (logits.empty()) {
    return absl::InvalidArgumentError("logits: empty");
  }
  double max = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("logits: non-finite value at index ", i));
    }
    max = std::max(max, static_cast<double>(logits[i]));
  }
  // With x_i = l_i − max, Z = Σ e^{x_i} ∈ [1, V] and
  // H = −Σ p_i log p_i = log Z − Σ e^{x_i} x_i / Z.
  double z = 0.0;
  double weighted = 0.0;
  for (float l : logits) {
    const double x = static_cast<double>(l) - max;
    const double e = std::exp(x);
    z += e;
    weighted += e * x;
  }
  const double h = std::log(z) - weighted / z;
  return h > 0.0 ? h : 0.0;  // Rounding may leave -1e-17 for a one-hot.
}

absl::Status ValidateEntropy(double entropy) {
  if (!std::isfinite(entropy)) {
    return absl::InvalidArgumentError("entropy: not finite");
  }
  if (entropy < 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("entropy: ", entropy, " is negative"));
  }
  return absl::OkStatus();
}

}  // namespace entrokv
