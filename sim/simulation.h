// The simulator of the original experiment: a synthetic reasoning stream run
// through a policy, with the memory-error audit and the equal-memory policy
// comparison (DESIGN.md "Quality metrics"; docs/simulator.md).
// Pure functions over core; thread-compatible.

#ifndef ENTROKV_SIM_SIMULATION_H_
#define ENTROKV_SIM_SIMULATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "entrokv/core/config.h"
#include "entrokv/core/synthetic.h"

namespace entrokv::sim {

struct RunOptions {
  SyntheticParams stream;
  SessionConfig session;
  int64_t steps = 1000;
  bool quality = true;  // Compute per-step metrics (the costly part).
};

struct RunResult {
  std::vector<double> memory_error;       // Per step (quality only).
  std::vector<double> recall;             // Per step (quality only).
  std::vector<double> first_order_error;  // Per step (quality only).
  std::vector<uint64_t> evicted;          // Every eviction, in order.
  double mean_live = 0.0;  // Live entries after each step, averaged.
  int64_t peak_live = 0;
};

absl::StatusOr<RunResult> Run(const RunOptions& options);

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
// `target_mean_live` within 1%.
absl::StatusOr<std::vector<ComparisonRow>> Compare(const RunOptions& base,
                                                   double target_mean_live);

}  // namespace entrokv::sim

#endif  // ENTROKV_SIM_SIMULATION_H_
