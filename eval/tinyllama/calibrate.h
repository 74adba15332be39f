// The statistics of entrokv-eval, kept apart from the model so that they can be
// tested on stubs: the search for the nominal budget at which a policy's run
// holds a target mean number of live entries, the paired bootstrap of a
// perplexity ratio over stories, and the split of the stories into a tuning
// and a test set.
//
// Thread-safety: the functions are reentrant; SearchBudget calls its callback
// from the calling thread only.

#ifndef ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_CALIBRATE_H_
#define ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_CALIBRATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/status/statusor.h"

namespace entrokv::tinyllama {

// Where a budget search ended. Either a run landed within the tolerance of
// the target (`hit`), or two adjacent budgets bracket it: mean_live(lo) <=
// target < mean_live(hi), hi == lo + 1. All -1 when the target lies outside
// what budgets in [min_budget, max_budget] reach.
struct BudgetSearchResult {
  int64_t hit = -1;
  int64_t lo = -1;
  int64_t hi = -1;
  int probes = 0;  // Budgets evaluated by this search (not known before).
  bool found() const { return hit >= 0 || (lo >= 0 && hi >= 0); }
};

// Searches the integer nominal budget whose run holds `target` mean live
// entries, assuming mean live grows with the budget. `known` holds the mean
// live of budgets already evaluated (it is updated with every probe), so that
// searches for several targets on one curve share their runs. Stops as soon
// as a known budget lies within `tolerance` (absolute, in entries; 0: only a
// bracketing pair of adjacent budgets ends the search) of the target.
// Probes: first `first_guess` (0: none) when it is not known yet and lies
// strictly between the nearest known budgets on either side of the target
// (or on the open side); then a secant step on (budget, mean live) between the
// nearest budgets on either side, bisection after 8 steps; from one side
// only, a step along the slope mean_live(b) / b; with nothing known, the
// target rounded. Probes are clamped to [min_budget, max_budget].
// REQUIRES: 1 <= min_budget <= max_budget.
absl::StatusOr<BudgetSearchResult> SearchBudget(
    double target, double tolerance, int64_t min_budget, int64_t max_budget,
    int64_t first_guess,
    const std::function<absl::StatusOr<double>(int64_t budget)>& mean_live_at,
    std::map<int64_t, double>* known);

// A perplexity ratio of two runs over the same stories, with a bootstrap
// confidence interval. The ratio is exp(Σ_s (b_s − a_s) / Σ_s n_s), where a_s
// and b_s are story s's summed NLL under runs A and B and n_s its scored
// tokens; reported as 100·(ratio − 1), the percent by which B's perplexity
// exceeds A's.
struct PairedDifference {
  double pct = 0.0;
  double lo_pct = 0.0;  // Percentile bootstrap interval at `level`.
  double hi_pct = 0.0;
  // The interval excludes 0.
  bool significant() const { return lo_pct > 0.0 || hi_pct < 0.0; }
};

// Resamples the stories with replacement `resamples` times (seeded, so the
// result is reproducible) and takes the (1 − level)/2 and (1 + level)/2
// quantiles (nearest rank: the ceil(q·resamples)-th smallest, 1-based) of the
// resampled percent differences.
// REQUIRES: a, b and tokens of equal non-zero size; resamples >= 1;
// 0 < level < 1.
PairedDifference PairedBootstrap(const std::vector<double>& a,
                                 const std::vector<double>& b,
                                 const std::vector<int64_t>& tokens,
                                 int resamples, uint64_t seed, double level);

// The stories' indices split in two disjoint sets: the tuning stories are the
// first `tune` of `total`, the test stories the next `test` after them (0: all
// that are left). Both are clamped to `total`.
struct StorySplit {
  std::vector<int> tune;
  std::vector<int> test;
};
StorySplit SplitStories(int total, int tune, int test);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_CALIBRATE_H_
