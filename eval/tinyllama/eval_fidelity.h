// entrokv-eval --fidelity: what a cheaper way of scoring costs
// (docs/fidelity.md). Each policy is run scored exactly and with the
// variant; for each target mean live the nominal budget of each is searched
// until two adjacent budgets bracket the target, log-perplexity is
// interpolated between them, and the evictions of the two at the same
// nominal budget are compared. Prints a table and writes <out>/fidelity.csv.
//
// Thread-safety: runs its own worker pool (--threads); call from one thread.

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_FIDELITY_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_FIDELITY_H_

#include <cstdint>
#include <filesystem>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "tinyllama/decider.h"
#include "tinyllama/eval_curve.h"
#include "tinyllama/eval_policies.h"
#include "tinyllama/eval_run.h"
#include "tinyllama/model.h"

namespace entrokv::tinyllama {

// Agreement of two runs' evictions, story by story (same stories, same
// nominal budget).
struct Overlap {
  // Jaccard index of the sets of positions ever evicted by the end of each
  // story, averaged over stories (1 when both evict nothing).
  double evicted = 0.0;
  // Jaccard index of the sets of entries each scored token attends over,
  // averaged over every scored token of every story.
  double live = 0.0;
};
Overlap CompareEvictions(const Run& a, const Run& b);

// The variant's perplexity relative to the exact one at a target, with the
// story-to-story spread. Linear interpolation of log-perplexity between two
// runs over the same stories is the same weight applied to each story's NLL,
// so the difference splits exactly into per-story terms d_s; its standard
// error treats the stories as the sample (ratio estimator).
struct PairedDiff {
  double pct = std::numeric_limits<double>::quiet_NaN();  // 100·(ratio − 1).
  double se_pct = std::numeric_limits<double>::quiet_NaN();
};
// NaN for both when either bracket is empty.
PairedDiff Difference(const Bracket& exact, const Bracket& variant,
                      double target);

// Runs the measurement for every pair at every target on `stories`; writes
// <out_dir>/fidelity.csv. Bad input when a pair's variant is exact scoring.
// REQUIRES: `out_dir` exists.
absl::Status Fidelity(const Model& model,
                      const std::vector<std::vector<int>>& stories,
                      Decider* decider, const std::vector<PolicyPair>& pairs,
                      const std::vector<int64_t>& targets,
                      const std::filesystem::path& out_dir);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_FIDELITY_H_
