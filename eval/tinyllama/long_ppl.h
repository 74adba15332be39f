// Long-range perplexity (after LongPPL, Fang et al., "What is Wrong with
// Perplexity for Long-context Language Modeling?", arXiv:2410.23771):
// perplexity over the *key tokens* only, the tokens that the model predicts
// much better with the whole context than with a short window of it.
//
// A scored token t is a key token when both
//   LSD_t = log P_full(x_t) − log P_short(x_t) = NLL_short,t − NLL_full,t > α
//   log P_full(x_t) = −NLL_full,t > β
// hold (strict inequalities, as in the paper's code; α = 2, β = −2 there).
// P_full is the model's probability with the full cache and P_short with a
// short recent window of it. The key tokens are chosen once per story, from
// those two runs alone, and the same tokens then score every policy:
// LongPPL = exp(Σ_key NLL / key tokens). docs/results-tinystories.md,
// "Long-range perplexity", says which window entrokv-eval uses and why.
//
// Thread-safety: pure functions.

#ifndef ENTROKV_EVAL_TINYLLAMA_LONG_PPL_H_
#define ENTROKV_EVAL_TINYLLAMA_LONG_PPL_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace entrokv::tinyllama {

struct KeyTokenParams {
  double alpha = 2.0;  // Threshold on LSD, nats.
  double beta = -2.0;  // Threshold on log P_full, nats.
};

// 1 where token t is a key token, else 0, for each scored token.
// REQUIRES: full_nll.size() == short_nll.size().
std::vector<uint8_t> SelectKeyTokens(absl::Span<const double> full_nll,
                                     absl::Span<const double> short_nll,
                                     const KeyTokenParams& params);

// Σ NLL over the key tokens of one story, and their count.
struct KeyNll {
  double nll = 0.0;
  int64_t tokens = 0;
};

// REQUIRES: nll.size() == key.size().
KeyNll SumOverKeyTokens(absl::Span<const double> nll,
                        absl::Span<const uint8_t> key);

// exp(nll / tokens); NaN when tokens is 0.
double LongPerplexity(double nll, int64_t tokens);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_LONG_PPL_H_
