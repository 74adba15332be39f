// The policies entrokv-eval evaluates: the --policies names, each with the
// scoring variant of the variant flags (--sketch, --query_form,
// --scored_layers, --decide_every, --block_size, --block_summary,
// --cadence_scaled_rates) applied and paired with the same policy scored
// exactly; and how a policy and its parameters are labelled in the output.
//
// Thread-safety: reentrant (the flags are only read).

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_POLICIES_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_POLICIES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "entrokv/core/config.h"
#include "tinyllama/model.h"

namespace entrokv::tinyllama {

// A policy with the variant flags applied, and the same policy scored
// exactly (ExactScoring, with the policy's own rates).
struct PolicyPair {
  SessionConfig exact;
  SessionConfig variant;
};

// The variant flags, applied to `config`.
absl::Status ApplyVariant(const ModelConfig& model, SessionConfig* config);

// The same policy scored exactly (entrokv::ExactScoring) with every model
// layer in its shape.
SessionConfig ExactScoring(const ModelConfig& model, SessionConfig config);

// VariantName, with " scaled-rates" when --cadence_scaled_rates applies.
std::string VariantLabel(const SessionConfig& config);

// The policies `flag` names (comma-separated RANKING+CONTROL names, or
// "all": every ranking with every budget controller), each validated with
// the variant applied. Those whose ranking needs per-head queries are left
// out under group_sum, with a note on stdout. InvalidArgument when none is
// left.
absl::StatusOr<std::vector<PolicyPair>> Policies(const ModelConfig& model,
                                                 const std::string& flag);

// `config` at nominal budget `budget`; under the threshold budget control
// also tau = --threshold_share / budget, so that a budget search calibrates
// the ceiling and the threshold together.
SessionConfig AtBudget(SessionConfig config, int64_t budget);

// The parameters a policy's ranking or controller uses, as text.
std::string ParamsOf(const SessionConfig& c);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_POLICIES_H_
