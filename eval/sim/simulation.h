// The simulator of the original experiment: a synthetic reasoning stream run
// through a policy, with the memory-error audit and the equal-memory policy
// comparison (docs/design.md "Quality metrics"; docs/simulator.md).
// Pure functions over core; thread-compatible.

#ifndef ENTROKV_SIM_SIMULATION_H_
#define ENTROKV_SIM_SIMULATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "entrokv/core/config.h"
#include "entrokv/core/synthetic.h"
#include "scoring_variant.h"

namespace entrokv::sim {

struct RunOptions {
  // The stream always generates an engine's full vectors (stream.shape's
  // layers, q heads and head_dim); the memory error is measured on those.
  SyntheticParams stream;
  // The policy. Its shape's sketch_dim and query_form, and scored_layers
  // (indices into the stream's layers), say what core is sent: the scored
  // layers, projected and group-summed by entrokv::Sketcher. The rest of the
  // shape is the stream's.
  SessionConfig session;
  int64_t steps = 1000;
  bool quality = true;  // Compute per-step metrics (the costly part).
};

struct RunResult {
  std::vector<double> memory_error;       // Per step (quality only).
  std::vector<double> recall;             // Per step (quality only).
  std::vector<double> first_order_error;  // Per step (quality only).
  std::vector<uint64_t> evicted;          // Every eviction, in order.
  std::vector<int64_t> evicted_step;      // The step of each eviction.
  double mean_live = 0.0;  // Live entries after each step, averaged.
  int64_t peak_live = 0;
};

absl::StatusOr<RunResult> Run(const RunOptions& options);

// The session configuration Run() creates: options.session with the stream's
// shape, the session's sketch and query form, and layers = the number of
// scored layers.
SessionConfig SessionFor(const RunOptions& options);

struct Summary {
  double mean = 0.0;
  double variance = 0.0;  // Unbiased, over steps.
  double min = 0.0;
  double max = 0.0;
  double p95 = 0.0;
  double lag1 = 0.0;  // Lag-1 autocorrelation.
};
Summary Summarize(const std::vector<double>& values);

struct Audit {
  Summary error;
  double analytical_mean = 0.0;  // Mean of the first-order estimate.
  double divergence = 0.0;       // |analytical − empirical| / empirical.
};
Audit MakeAudit(const RunResult& run);

// The multi-seed sanity check: the seed means must agree within what the
// per-step variance allows: a chi-square test of the seed means against their
// standard errors, which come from batch means (the per-step errors are
// autocorrelated over a topic's dwell, so steps are not independent).
struct SanityCheck {
  std::vector<uint64_t> seeds;
  std::vector<double> means;
  std::vector<double> standard_errors;
  double chi_square = 0.0;
  int degrees_of_freedom = 0;
  double critical = 0.0;  // At p = 0.001.
  bool passed = false;
};
absl::StatusOr<SanityCheck> RunSanityCheck(const RunOptions& options,
                                           const std::vector<uint64_t>& seeds);

// One row of the comparison table.
struct ComparisonRow {
  std::string policy;  // "affinity+entropy", "h2o+fixed", ...
  int64_t nominal_budget = 0;
  double mean_error = 0.0;
  double p95_error = 0.0;
  double recall = 0.0;
  double mean_live = 0.0;
  int64_t peak_live = 0;
  bool matched = false;  // Mean live within 1% of the target.
};

// Every ranking × budget control (and the seed affinity rule), each with its
// nominal budget calibrated by bisection so that its mean live entries match
// `target_mean_live` within 1%. Rankings that need per-head queries are left
// out under group-sum queries.
absl::StatusOr<std::vector<ComparisonRow>> Compare(const RunOptions& base,
                                                   double target_mean_live);

// A run at a target mean live count: the two adjacent nominal budgets whose
// mean live entries bracket it (lo <= target < hi = lo + 1), found by
// bisection, both run with quality metrics; the memory error is interpolated
// linearly in mean live between them, step by step.
struct Calibration {
  bool found = false;  // False when no budget reaches the target.
  int64_t lo_budget = 0;
  int64_t hi_budget = 0;
  RunResult lo;
  RunResult hi;
  std::vector<double> memory_error;  // Per step, interpolated.
  double mean_error = 0.0;
  double recall = 0.0;  // Interpolated likewise.
};
absl::StatusOr<Calibration> Calibrate(const RunOptions& options,
                                      double target_mean_live);

// A cheaper-scoring variant against the same policy scored exactly
// (ExactScoring of variant.session), at equal mean live entries.
struct FidelityRow {
  std::string policy;
  std::string variant;
  double target_mean_live = 0.0;
  Calibration exact;
  Calibration cheap;
  double diff_pct = 0.0;  // 100 · (cheap mean error / exact − 1).
  // Standard error of diff_pct by batch means of the per-step difference
  // (steps are autocorrelated; see RunSanityCheck).
  double diff_se_pct = 0.0;
  // At the same nominal budget (the exact bracket's budget nearer the
  // target): Jaccard index of the sets of entries ever evicted, and the
  // mean over steps of the Jaccard index of the live sets after each step.
  int64_t same_budget = 0;
  double evicted_jaccard = 0.0;
  double live_jaccard = 0.0;
};
absl::StatusOr<FidelityRow> MeasureFidelity(const RunOptions& variant,
                                            double target_mean_live);
// The same against a given exact run (e.g. the policy with its own rates
// when the variant's were scaled with its cadence).
absl::StatusOr<FidelityRow> MeasureFidelity(const RunOptions& exact,
                                            const RunOptions& variant,
                                            double target_mean_live);

}  // namespace entrokv::sim

#endif  // ENTROKV_SIM_SIMULATION_H_
