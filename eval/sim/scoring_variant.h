// Cheaper-scoring variants of a session configuration (a sketch, group-sum
// queries, a subset of the layers, a decision cadence, block summaries), as
// shared by the simulator (entrokv-sim --fidelity) and the tinyllama
// evaluation (entrokv-eval --fidelity). Pure functions over core; reentrant.

#ifndef ENTROKV_SIM_SCORING_VARIANT_H_
#define ENTROKV_SIM_SCORING_VARIANT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "entrokv/core/config.h"

namespace entrokv {

// The same policy scored exactly: no sketch, per-head queries, every layer,
// a decision every step, per-token state (the block size stays: block
// eviction is a granularity, not an approximation of scoring). The shape's
// layer count is left as it is.
SessionConfig ExactScoring(SessionConfig config);

// "exact", or the cheaper-scoring parts of `config`: "project:4 group_sum
// layers:0,1 every:4 block:4 summary".
std::string VariantName(const SessionConfig& config);

// With decide_every K > 1, the ranking state and the entropy EMA advance
// once per decision; λ → λ^K and r → 1 − (1 − r)^K make them span as many
// steps as λ and r do when every step decides.
void ScaleRatesWithCadence(SessionConfig* config);

// The smallest nominal budget ValidateSessionConfig accepts for `config`:
// with block summaries (one state per block) a whole block, block_size;
// else 1. Where a budget search starts.
int64_t MinBudget(const SessionConfig& config);

// A --scored_layers flag: "all" (empty), or a comma list of layers of
// 0..model_layers-1, sorted; empty when it names every layer.
absl::StatusOr<std::vector<int32_t>> ParseScoredLayers(absl::string_view text,
                                                       int32_t model_layers);

// The engine's side of SessionConfig::scored_layers: the rows of the scored
// layers out of `all`, a [model layer][per_layer] vector. Empty `layers`: all
// of `all`. InvalidArgument when `all` is not a whole number of layers or a
// scored layer is beyond it.
absl::Status SelectScoredLayers(const std::vector<int32_t>& layers,
                                int64_t per_layer, absl::Span<const float> all,
                                std::vector<float>* out);

}  // namespace entrokv

#endif  // ENTROKV_SIM_SCORING_VARIANT_H_
