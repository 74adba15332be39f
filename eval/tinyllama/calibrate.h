// The statistics of entrokv-eval, kept apart from the model so that they can be
// tested on stubs: the paired bootstrap of a perplexity ratio over stories,
// the rank agreement of a measure with perplexity (and its bootstrap), and
// the split of the stories into a tuning and a test set. (The budget
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

// Spearman's rank correlation of x and y: the Pearson correlation of their
// ranks, tied values taking the mean of the ranks they span. NaN when x and
// y differ in size, have fewer than 2 elements, hold a value that is not
// finite, or either has one value only.
double SpearmanRho(const std::vector<double>& x, const std::vector<double>& y);

// One policy at one target over the same stories as every other: per story
// s its summed NLL and scored tokens (the run's perplexity over a multiset of
// stories is exp(Σ nll / Σ tokens)), and a measure's numerator and
// denominator (the measure over the multiset is Σ num / Σ den; e.g. mean
// recall: Σ recall over the scored steps / the steps scored).
struct RankedRun {
  int group = 0;  // Runs compared with each other: the same target.
  std::vector<double> nll;
  std::vector<int64_t> tokens;
  std::vector<double> num;
  std::vector<double> den;
};

// How well a measure ranks runs as perplexity does: ρ = SpearmanRho(measure,
// −perplexity), so +1 means a higher measure always comes with a lower
// perplexity. `pooled` is ρ over every run; `within` the mean over groups of
// ρ within each group (a group whose measure or perplexity has one value is
// left out; NaN when none is left). Each with a percentile bootstrap interval
// at `level` over `resamples` resamples of the stories, drawn with
// replacement (seeded; one draw serves every run, so runs stay paired), and
// the interval's bounds taken as in PairedBootstrap.
struct RankAgreement {
  double rho = 0.0;
  double lo = 0.0;
  double hi = 0.0;
};
struct MeasureAgreement {
  RankAgreement pooled;
  RankAgreement within;
  int groups = 0;  // Groups with a defined ρ in the full sample.
};
// REQUIRES: every run has as many stories (> 0) in each vector;
// resamples >= 1; 0 < level < 1.
MeasureAgreement RankAgreementBootstrap(const std::vector<RankedRun>& runs,
                                        int resamples, uint64_t seed,
                                        double level);

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
