#include "tinyllama/eval_policies.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "entrokv/core/status_macros.h"
#include "scoring_variant.h"
#include "tinyllama/eval_flags.h"
#include "tinyllama/evaluator.h"

namespace entrokv::tinyllama {

absl::Status ApplyVariant(const ModelConfig& model, SessionConfig* config) {
  ENTROKV_RETURN_IF_ERROR(
      ApplySketchName(absl::GetFlag(FLAGS_sketch), &config->shape));
  if (!ParseQueryForm(absl::GetFlag(FLAGS_query_form),
                      &config->shape.query_form)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--query_form: '", absl::GetFlag(FLAGS_query_form),
                     "'; want per_head or group_sum"));
  }
  const std::string layers = absl::GetFlag(FLAGS_scored_layers);
  if (layers == "default") {
    config->scored_layers = DefaultScoredLayers(model.layers);
  } else {
    ENTROKV_ASSIGN_OR_RETURN(config->scored_layers,
                             ParseScoredLayers(layers, model.layers));
  }
  if (static_cast<int32_t>(config->scored_layers.size()) == model.layers) {
    config->scored_layers.clear();  // All of them: the plain shape.
  }
  config->shape.layers =
      config->scored_layers.empty()
          ? model.layers
          : static_cast<int32_t>(config->scored_layers.size());
  config->decide_every = absl::GetFlag(FLAGS_decide_every);
  config->block_size = absl::GetFlag(FLAGS_block_size);
  config->block_summary = absl::GetFlag(FLAGS_block_summary);
  return absl::OkStatus();
}

SessionConfig ExactScoring(const ModelConfig& model, SessionConfig config) {
  config = entrokv::ExactScoring(std::move(config));
  config.shape.layers = model.layers;
  return config;
}

std::string VariantLabel(const SessionConfig& config) {
  std::string name = VariantName(config);
  if (config.decide_every > 1 && absl::GetFlag(FLAGS_cadence_scaled_rates)) {
    absl::StrAppend(&name, " scaled-rates");
  }
  return name;
}

absl::StatusOr<std::vector<PolicyPair>> Policies(const ModelConfig& model,
                                                 const std::string& flag) {
  std::vector<SessionConfig> named;
  if (flag == "all") {
    for (Ranking ranking : kAllRankings) {
      for (BudgetControl control : kAllBudgetControls) {
        // A threshold's tau is on its ranking's scale: named policies only.
        if (control == BudgetControl::kThreshold) continue;
        SessionConfig config = EngineSessionConfig(model, 1);
        config.ranking = ranking;
        config.budget_control = control;
        named.push_back(config);
      }
    }
  } else {
    for (absl::string_view name :
         absl::StrSplit(flag, ',', absl::SkipEmpty())) {
      SessionConfig config = EngineSessionConfig(model, 1);
      const std::string n(name);
      ENTROKV_RETURN_IF_ERROR(ApplyPolicyName(n, &config));
      named.push_back(config);
    }
  }
  std::vector<PolicyPair> policies;
  for (SessionConfig config : named) {
    ENTROKV_RETURN_IF_ERROR(ApplyVariant(model, &config));
    if (config.shape.query_form == QueryForm::kGroupSum &&
        RankingNeedsPerHeadQueries(config.ranking)) {
      std::printf(
          "note: skipping %s: ranking %s needs each q head's "
          "attention, which group_sum queries do not give\n",
          PolicyName(config).c_str(),
          std::string(RankingName(config.ranking)).c_str());
      continue;
    }
    // Checked at a budget every variant accepts; each run sets its own.
    config.budget = 1 << 20;
    if (absl::Status st = ValidateSessionConfig(config); !st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat(PolicyName(config), " ", VariantLabel(config),
                                  ": ", st.message()));
    }
    config.budget = 1;
    PolicyPair pair{ExactScoring(model, config), config};
    if (absl::GetFlag(FLAGS_cadence_scaled_rates)) {
      ScaleRatesWithCadence(&pair.variant);
    }
    policies.push_back(pair);
  }
  if (policies.empty()) {
    return absl::InvalidArgumentError("no policy left to evaluate");
  }
  const double share = absl::GetFlag(FLAGS_threshold_share);
  if (!(share > 0.0) || !std::isfinite(share)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threshold_share: ", share, "; want a finite value > 0"));
  }
  return policies;
}

SessionConfig AtBudget(SessionConfig config, int64_t budget) {
  config.budget = budget;
  if (config.budget_control == BudgetControl::kThreshold) {
    config.threshold.tau = absl::GetFlag(FLAGS_threshold_share) /
                           static_cast<double>(std::max<int64_t>(budget, 1));
  }
  return config;
}

std::string ParamsOf(const SessionConfig& c) {
  std::vector<std::string> parts;
  if (c.ranking == Ranking::kAffinity) {
    parts.push_back(absl::StrCat(
        "update=", std::string(AffinityUpdateName(c.affinity.update)),
        " beta=", c.affinity.beta));
    if (c.affinity.update == AffinityUpdate::kLogitEma) {
      parts.push_back(absl::StrCat("lambda=", c.affinity.lambda));
    }
  }
  if (c.ranking == Ranking::kH2o) {
    parts.push_back(absl::StrCat("recent_fraction=", c.h2o.recent_fraction));
  }
  if (c.ranking == Ranking::kExpected) {
    parts.push_back(absl::StrCat("ema_rate=", c.expected.ema_rate));
  }
  if (c.ranking == Ranking::kBirth) {
    parts.push_back(absl::StrCat("weight=", c.birth.weight));
  }
  if (c.ranking == Ranking::kRkv) {
    parts.push_back(absl::StrCat("lambda=", c.rkv.lambda,
                                 " sample=", c.rkv.sample));
  }
  if (c.ranking == Ranking::kStreaming) {
    parts.push_back(absl::StrCat("sinks=", c.streaming_sinks));
  }
  if (c.budget_control == BudgetControl::kEntropy) {
    parts.push_back(absl::StrCat("gamma=", c.entropy_budget.gamma,
                                 " ema_rate=", c.entropy_budget.ema_rate));
    if (c.entropy_budget.max_budget != 0) {
      parts.push_back(absl::StrCat("max_budget=", c.entropy_budget.max_budget));
    }
  }
  if (c.budget_control == BudgetControl::kThreshold) {
    parts.push_back(absl::StrCat(
        "tau=", absl::GetFlag(FLAGS_threshold_share), "/B recent=",
        c.protection.recent));
  }
  return absl::StrJoin(parts, " ");
}

}  // namespace entrokv::tinyllama
