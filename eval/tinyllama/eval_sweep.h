// entrokv-eval --sweep: every policy at the nominal --budgets (curves), and
// one token late at --pipelined_budgets, on the stories. Prints the
// perplexity at equal mean live entries --targets (log-perplexity
// interpolated in mean live between the measured budgets) and pipelined
// against immediate; writes <out>/tinystories_runs.csv,
// tinystories_results.json and, with --plot, tinystories_ppl_vs_live.png.
//
// Thread-safety: runs its own worker pool (--threads); call from one thread.

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_SWEEP_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_SWEEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "entrokv/core/config.h"
#include "tinyllama/decider.h"
#include "tinyllama/eval_run.h"
#include "tinyllama/model.h"

namespace entrokv::tinyllama {

// `full` is the full-cache run on the same stories.
// REQUIRES: `budgets`, `pipelined` and `targets` sorted.
absl::Status Sweep(const Model& model,
                   const std::vector<std::vector<int>>& stories,
                   Decider* decider, const std::string& data_dir,
                   const std::vector<SessionConfig>& policies,
                   const std::vector<int64_t>& budgets,
                   const std::vector<int64_t>& pipelined,
                   const std::vector<int64_t>& targets, Run full);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_SWEEP_H_
