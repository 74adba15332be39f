#include "tinyllama/long_ppl.h"

#include <cassert>
#include <cmath>
#include <limits>

namespace entrokv::tinyllama {

std::vector<uint8_t> SelectKeyTokens(absl::Span<const double> full_nll,
                                     absl::Span<const double> short_nll,
                                     const KeyTokenParams& params) {
  assert(full_nll.size() == short_nll.size());
  std::vector<uint8_t> key(full_nll.size(), 0);
  for (size_t t = 0; t < full_nll.size(); ++t) {
    const double lsd = short_nll[t] - full_nll[t];
    const double log_p_full = -full_nll[t];
    key[t] = (lsd > params.alpha && log_p_full > params.beta) ? 1 : 0;
  }
  return key;
}

KeyNll SumOverKeyTokens(absl::Span<const double> nll,
                        absl::Span<const uint8_t> key) {
  assert(nll.size() == key.size());
  KeyNll sum;
  for (size_t t = 0; t < nll.size(); ++t) {
    if (key[t] == 0) continue;
    sum.nll += nll[t];
    ++sum.tokens;
  }
  return sum;
}

double LongPerplexity(double nll, int64_t tokens) {
  if (tokens == 0) return std::numeric_limits<double>::quiet_NaN();
  return std::exp(nll / static_cast<double>(tokens));
}

}  // namespace entrokv::tinyllama
