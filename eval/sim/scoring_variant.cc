#include "scoring_variant.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace entrokv {

SessionConfig ExactScoring(SessionConfig config) {
  config.shape.sketch_dim = 0;
  config.shape.query_form = QueryForm::kPerHead;
  config.scored_layers.clear();
  config.decide_every = 1;
  config.hard_ceiling = 0;
  config.block_summary = false;
  return config;
}

std::string VariantName(const SessionConfig& config) {
  std::vector<std::string> parts;
  if (config.shape.sketch_dim > 0) parts.push_back(SketchName(config.shape));
  if (config.shape.query_form != QueryForm::kPerHead) {
    parts.emplace_back(QueryFormName(config.shape.query_form));
  }
  if (!config.scored_layers.empty()) {
    parts.push_back(
        absl::StrCat("layers:", absl::StrJoin(config.scored_layers, ",")));
  }
  if (config.decide_every > 1) {
    parts.push_back(absl::StrCat("every:", config.decide_every));
  }
  if (config.block_size > 1) {
    parts.push_back(absl::StrCat("block:", config.block_size));
  }
  if (config.block_summary) parts.emplace_back("summary");
  return parts.empty() ? "exact" : absl::StrJoin(parts, " ");
}

void ScaleRatesWithCadence(SessionConfig* config) {
  const int k = config->decide_every;
  if (k <= 1) return;
  config->affinity.lambda = std::pow(config->affinity.lambda, k);
  config->entropy_budget.ema_rate =
      1.0 - std::pow(1.0 - config->entropy_budget.ema_rate, k);
}

int64_t MinBudget(const SessionConfig& config) {
  return config.block_summary ? config.block_size : 1;
}

absl::StatusOr<std::vector<int32_t>> ParseScoredLayers(absl::string_view text,
                                                       int32_t model_layers) {
  std::vector<int32_t> layers;
  if (text == "all") return layers;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int32_t l = 0;
    if (!absl::SimpleAtoi(part, &l) || l < 0 || l >= model_layers) {
      return absl::InvalidArgumentError(absl::StrCat("--scored_layers: '", part,
                                                     "' is not a layer of 0..",
                                                     model_layers - 1));
    }
    layers.push_back(l);
  }
  std::sort(layers.begin(), layers.end());
  if (static_cast<int32_t>(layers.size()) == model_layers) layers.clear();
  return layers;
}

absl::Status SelectScoredLayers(const std::vector<int32_t>& layers,
                                int64_t per_layer, absl::Span<const float> all,
                                std::vector<float>* out) {
  if (per_layer <= 0 || all.size() % static_cast<size_t>(per_layer) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scored layers: ", all.size(),
                     " elements are not whole layers of ", per_layer));
  }
  if (layers.empty()) {
    out->assign(all.begin(), all.end());
    return absl::OkStatus();
  }
  const int64_t model_layers = static_cast<int64_t>(all.size()) / per_layer;
  out->clear();
  out->reserve(layers.size() * static_cast<size_t>(per_layer));
  for (const int32_t l : layers) {
    if (l < 0 || l >= model_layers) {
      return absl::InvalidArgumentError(absl::StrCat("scored_layers: layer ", l,
                                                     " is beyond the engine's ",
                                                     model_layers, " layers"));
    }
    const float* begin = all.data() + int64_t{l} * per_layer;
    out->insert(out->end(), begin, begin + per_layer);
  }
  return absl::OkStatus();
}

}  // namespace entrokv
