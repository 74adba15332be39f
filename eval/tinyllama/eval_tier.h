// entrokv-eval --tier: does a demote tier (docs/step-semantics.md section 12)
// pay on the real model? Each policy runs twice at each nominal budget B on
// the test stories: evicting only, and with a host tier of D = --tier_share ·
// B entries, the engine moving demoted and promoted entries' keys and values
// between its device and host stores (kv_cache.h). A fixed budget keeps
// min(t + 1, B + 1) entries on the device at token t either way, so the two
// hold the same device memory at every step, at the peak and on average (the
// report checks that the mean live counts agree). Both are compared by a
// paired bootstrap over test stories, in perplexity and in long-range
// perplexity over the protocol's key tokens (long_ppl.h), and the tier's
// cost is reported: promotions and demotions per decode step, and the bytes
// they move per step (K and V, every layer). window+fixed at the same budgets
// is given for scale.
//
// The tier's margin m and promotion cap P are tuned per policy on the tuning
// stories only, at nominal budget --tune_target, as the protocol tunes (the
// first value of each list is the default, a candidate must be strictly
// better): m over --tier_margins at P = the first of
// --tier_max_promotions, then P over the rest at the best m. The ranking's
// own parameters are core's defaults.
//
// Writes <out>/tier_report.md and tier_runs.csv.
//
// Thread-safety: runs its own worker pool (--threads); call from one thread.

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_TIER_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_TIER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "entrokv/core/config.h"
#include "tinyllama/decider.h"
#include "tinyllama/model.h"

namespace entrokv::tinyllama {

// The policies --tier compares when --policies is "all": the fixed-budget
// rankings that take a tier and did best in docs/results-2025.md.
inline constexpr char kTierDefaultPolicies[] =
    "rkv+fixed,tova+fixed,affinity+fixed";

// Runs the comparison for `policies` (each with a tier-capable ranking and
// budget control; bad input otherwise), prints the report and writes it.
absl::Status TierComparison(const Model& model,
                            const std::vector<std::vector<int>>& stories,
                            Decider* decider,
                            const std::vector<SessionConfig>& policies);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_TIER_H_
