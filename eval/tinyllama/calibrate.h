// The statistics of entrokv-eval, kept apart from the model so that they can be
// tested on stubs: the paired bootstrap of a perplexity ratio over stories,
// and the split of the stories into a tuning and a test set. (The budget
// search for a target mean live, which entrokv-sim uses too, is in
// eval/lib/budget_search.h.)
//
// Thread-safety: the functions are reentrant.

#ifndef ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_CALIBRATE_H_
#define ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_CALIBRATE_H_

#include <cstdint>
#include <vector>

namespace entrokv::tinyllama {

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
