// entrokv-eval's command line: the flags (defined in eval_flags.cc, read with
// absl::GetFlag wherever a mode needs them), the --help text and topics, the
// parsing of the list flags, and the mark that makes a failure exit 2 (bad
// input) rather than 1.
//
// Thread-safety: flags are parsed once, in main, before any other thread
// exists; reading them afterwards is thread-safe.

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_FLAGS_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/flags.h"

ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(int, stories);
ABSL_DECLARE_FLAG(int, tune);
ABSL_DECLARE_FLAG(int, test);
ABSL_DECLARE_FLAG(bool, tuning);
ABSL_DECLARE_FLAG(int, tune_target);
ABSL_DECLARE_FLAG(double, tolerance);
ABSL_DECLARE_FLAG(int, bootstrap);
ABSL_DECLARE_FLAG(int, seed);
ABSL_DECLARE_FLAG(bool, quick);
ABSL_DECLARE_FLAG(int, longppl_window);
ABSL_DECLARE_FLAG(double, longppl_alpha);
ABSL_DECLARE_FLAG(double, longppl_beta);
ABSL_DECLARE_FLAG(bool, equal_peak);
ABSL_DECLARE_FLAG(bool, sweep);
ABSL_DECLARE_FLAG(std::string, budgets);
ABSL_DECLARE_FLAG(std::string, targets);
ABSL_DECLARE_FLAG(std::string, policies);
ABSL_DECLARE_FLAG(std::string, pipelined_budgets);
ABSL_DECLARE_FLAG(bool, inprocess);
ABSL_DECLARE_FLAG(bool, recall);
ABSL_DECLARE_FLAG(std::string, server);
ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(bool, plot);
ABSL_DECLARE_FLAG(bool, progress);
ABSL_DECLARE_FLAG(std::string, sketch);
ABSL_DECLARE_FLAG(std::string, query_form);
ABSL_DECLARE_FLAG(std::string, scored_layers);
ABSL_DECLARE_FLAG(int, decide_every);
ABSL_DECLARE_FLAG(int, block_size);
ABSL_DECLARE_FLAG(bool, block_summary);
ABSL_DECLARE_FLAG(bool, cadence_scaled_rates);
ABSL_DECLARE_FLAG(bool, fidelity);
ABSL_DECLARE_FLAG(double, threshold_share);
ABSL_DECLARE_FLAG(bool, tier);
ABSL_DECLARE_FLAG(std::string, tier_budgets);
ABSL_DECLARE_FLAG(double, tier_share);
ABSL_DECLARE_FLAG(std::string, tier_margins);
ABSL_DECLARE_FLAG(std::string, tier_max_promotions);

namespace entrokv::tinyllama {

// The usage text and --help topics of entrokv-eval, for entrokv::ParseFlags.
ProgramInfo EvalProgramInfo();

// Marks `status` as bad input (a flag, or the data files they name): main()
// exits 2 on it, 1 on any other failure. An OK status stays as it is.
absl::Status BadInput(absl::Status status);
bool IsBadInput(const absl::Status& status);

// A comma-separated list of positive integers (the value of --`flag`),
// sorted; bad input otherwise.
absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& text,
                                               const char* flag);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_FLAGS_H_
