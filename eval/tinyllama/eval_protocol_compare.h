// Steps of the protocol (eval_protocol.h) beside perplexity at equal mean
// live: the key tokens of long-range perplexity (long_ppl.h), chosen once
// per test story, and every policy at equal peak live.
//
// Thread-safety: EqualPeak runs its own worker pool (--threads); call both
// from the protocol's thread.

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_COMPARE_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_COMPARE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "tinyllama/decider.h"
#include "tinyllama/eval_protocol.h"
#include "tinyllama/model.h"

namespace entrokv::tinyllama {

// Fills r's key tokens and the figures around them (printed): the full
// cache's per-token NLL (r->full, kept per token) against that of
// window+fixed at budget r->long_window on `test_stories`, the short
// window, which no policy under test influences.
// REQUIRES: r->long_window > 0; r->full evaluated with keep_token_nll.
absl::Status KeyTokens(const Model& model,
                       const std::vector<std::vector<int>>& test_stories,
                       Decider* decider, ProtocolResult* r);

// The key tokens every test run scores; null when LongPPL is off.
const std::vector<std::vector<uint8_t>>* KeysOf(const ProtocolResult& r);

// Fills r's equal-peak points: every policy at the nominal budgets of the
// reference's point at each target, an entropy-controlled budget capped
// there.
// REQUIRES: r's equal-mean points found (r->points).
absl::Status EqualPeak(const Model& model,
                       const std::vector<std::vector<int>>& test_stories,
                       Decider* decider, ProtocolResult* r);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_COMPARE_H_
