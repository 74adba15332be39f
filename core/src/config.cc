#include "entrokv/core/config.h"

#include <cmath>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace entrokv {
namespace {

template <typename Enum, size_t N>
bool ParseByName(std::string_view name, const Enum (&all)[N],
                 std::string_view (*name_of)(Enum), Enum* out) {
  for (Enum e : all) {
    if (name == name_of(e)) {
      *out = e;
      return true;
    }
  }
  return false;
}

constexpr AffinityUpdate kAllAffinityUpdates[] = {AffinityUpdate::kSeed,
                                                  AffinityUpdate::kLogitEma};
constexpr Placement kAllPlacements[] = {Placement::kCpu, Placement::kGpu,
                                        Placement::kAuto};

absl::Status Bad(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(field), ": ", std::string(why)));
}

// The largest dimension accepted for any shape field; keeps products of
// dimensions far from overflow.
constexpr int32_t kMaxDimension = 1 << 16;
constexpr int64_t kMaxBudget = int64_t{1} << 40;

// The shape: dimensions, sketch, query form and element type.
absl::Status ValidateShape(const SessionConfig& c) {
  const Shape& s = c.shape;
  auto dim = [](std::string_view field, int32_t v) -> absl::Status {
    if (v < 1 || v > kMaxDimension) {
      return Bad(field,
                 absl::StrCat(v, " is outside [1, ", kMaxDimension, "]"));
    }
    return absl::OkStatus();
  };
  if (auto st = dim("shape.layers", s.layers); !st.ok()) return st;
  if (auto st = dim("shape.kv_heads", s.kv_heads); !st.ok()) return st;
  if (auto st = dim("shape.q_heads", s.q_heads); !st.ok()) return st;
  if (auto st = dim("shape.head_dim", s.head_dim); !st.ok()) return st;
  if (s.q_heads % s.kv_heads != 0) {
    return Bad("shape.q_heads", absl::StrCat(s.q_heads,
                                             " is not a multiple of "
                                             "shape.kv_heads ",
                                             s.kv_heads));
  }
  if (s.sketch_dim < 0 || s.sketch_dim > s.head_dim) {
    return Bad("shape.sketch_dim",
               absl::StrCat(s.sketch_dim, " is outside [0, head_dim ",
                            s.head_dim, "] (0: exact)"));
  }
  if (s.query_form != QueryForm::kPerHead &&
      s.query_form != QueryForm::kGroupSum) {
    return Bad("shape.query_form", "unknown query form");
  }
  if (s.key_elements() > (int64_t{1} << 24) ||
      s.query_elements() > (int64_t{1} << 24)) {
    return Bad("shape", "layers x heads x head_dim exceeds 2^24 elements");
  }
  if (s.element_type != ElementType::kF32 &&
      s.element_type != ElementType::kF16 &&
      s.element_type != ElementType::kBf16) {
    return Bad("shape.element_type", "unknown element type");
  }
  return absl::OkStatus();
}

// The policy: budget, ranking, controller and their parameters.
absl::Status ValidatePolicyParams(const SessionConfig& c) {
  if (c.budget < 1 || c.budget > kMaxBudget) {
    return Bad("budget", absl::StrCat(c.budget, " is outside [1, 2^40]"));
  }
  if (static_cast<int>(c.ranking) > static_cast<int>(Ranking::kRkv)) {
    return Bad("ranking", "unknown ranking");
  }
  if (c.budget_control != BudgetControl::kFixed &&
      c.budget_control != BudgetControl::kEntropy &&
      c.budget_control != BudgetControl::kThreshold) {
    return Bad("budget_control", "unknown budget controller");
  }
  if (c.budget_control == BudgetControl::kThreshold &&
      !RankingHasScores(c.ranking)) {
    return Bad("budget_control",
               absl::StrCat("threshold compares keep scores with tau, and "
                            "ranking ",
                            std::string(RankingName(c.ranking)),
                            " scores by append index"));
  }
  if (!(c.rkv.lambda >= 0.0 && c.rkv.lambda <= 1.0)) {
    return Bad("rkv.lambda",
               absl::StrCat(c.rkv.lambda, " is outside [0, 1]"));
  }
  if (c.rkv.sample < 1 || c.rkv.sample > 65536) {
    return Bad("rkv.sample",
               absl::StrCat(c.rkv.sample, " is outside [1, 65536]"));
  }
  if (!std::isfinite(c.threshold.tau)) {
    return Bad("threshold.tau", "must be finite");
  }
  const AffinityParams& a = c.affinity;
  if (a.update != AffinityUpdate::kSeed &&
      a.update != AffinityUpdate::kLogitEma) {
    return Bad("affinity.update", "unknown update rule");
  }
  if (!(std::fabs(a.beta) <= 1e6)) {
    return Bad("affinity.beta",
               absl::StrCat(a.beta, " is outside [-1e6, 1e6]"));
  }
  if (!(a.lambda >= 0.0 && a.lambda <= 1.0)) {
    return Bad("affinity.lambda", absl::StrCat(a.lambda, " is outside [0, 1]"));
  }
  const EntropyBudgetParams& e = c.entropy_budget;
  if (!(e.gamma >= 0.0 && e.gamma < 1.0)) {
    return Bad("entropy_budget.gamma",
               absl::StrCat(e.gamma, " is outside [0, 1)"));
  }
  if (!(e.ema_rate > 0.0 && e.ema_rate <= 1.0)) {
    return Bad("entropy_budget.ema_rate",
               absl::StrCat(e.ema_rate, " is outside (0, 1]"));
  }
  if (!(e.epsilon > 0.0) || !std::isfinite(e.epsilon)) {
    return Bad("entropy_budget.epsilon", "must be finite and > 0");
  }
  if (e.min_budget < 0 || e.min_budget > c.budget) {
    return Bad(
        "entropy_budget.min_budget",
        absl::StrCat(e.min_budget, " is outside [0, budget ", c.budget, "]"));
  }
  if (e.max_budget != 0 &&
      (e.max_budget < c.budget || e.max_budget > kMaxBudget)) {
    return Bad("entropy_budget.max_budget",
               absl::StrCat(e.max_budget, " is outside [budget ", c.budget,
                            ", 2^40] (0 means ceil(budget * (1 + gamma)))"));
  }
  if (!(c.h2o.recent_fraction >= 0.0 && c.h2o.recent_fraction <= 1.0)) {
    return Bad("h2o.recent_fraction",
               absl::StrCat(c.h2o.recent_fraction, " is outside [0, 1]"));
  }
  if (!(c.birth.weight >= 0.0 && c.birth.weight <= 100.0)) {
    return Bad("birth.weight",
               absl::StrCat(c.birth.weight, " is outside [0, 100]"));
  }
  if (!(c.expected.ema_rate > 0.0 && c.expected.ema_rate <= 1.0)) {
    return Bad("expected.ema_rate",
               absl::StrCat(c.expected.ema_rate, " is outside (0, 1]"));
  }
  return absl::OkStatus();
}

// Protection counts, granularity, cadence, scored layers and placement.
absl::Status ValidateGranularity(const SessionConfig& c) {
  const Shape& s = c.shape;
  // Counts of entries: at most the largest budget, so that rounding them up
  // to whole blocks cannot overflow.
  for (const auto& [field, v] :
       {std::pair<std::string_view, int64_t>{"streaming_sinks",
                                             c.streaming_sinks},
        {"protection.sinks", c.protection.sinks},
        {"protection.recent", c.protection.recent}}) {
    if (v < 0 || v > kMaxBudget) {
      return Bad(field, absl::StrCat(v, " is outside [0, 2^40]"));
    }
  }
  if (c.block_size < 1 || c.block_size > 65536) {
    return Bad("block_size",
               absl::StrCat(c.block_size, " is outside [1, 65536]"));
  }
  if (c.block_reduce != BlockReduce::kMean &&
      c.block_reduce != BlockReduce::kMax) {
    return Bad("block_reduce", "unknown reduction");
  }
  if (s.query_form == QueryForm::kGroupSum &&
      RankingNeedsPerHeadQueries(c.ranking)) {
    return Bad("shape.query_form",
               absl::StrCat("group_sum queries give no per-head attention, "
                            "which ranking ",
                            std::string(RankingName(c.ranking)), " needs"));
  }
  if (c.block_summary && c.block_size < 2) {
    return Bad("block_summary", "needs block granularity (block_size >= 2)");
  }
  if (c.block_summary && c.budget < c.block_size) {
    return Bad("block_summary",
               absl::StrCat("budget ", c.budget, " is below one block of ",
                            c.block_size, " tokens"));
  }
  if (c.decide_every < 1 || c.decide_every > 65536) {
    return Bad("decide_every",
               absl::StrCat(c.decide_every, " is outside [1, 65536]"));
  }
  if (c.hard_ceiling != 0 &&
      (c.hard_ceiling < c.budget || c.hard_ceiling > kMaxBudget)) {
    return Bad("hard_ceiling",
               absl::StrCat(c.hard_ceiling, " is outside [budget ", c.budget,
                            ", 2^40] (0: no ceiling)"));
  }
  if (!c.scored_layers.empty()) {
    if (static_cast<int64_t>(c.scored_layers.size()) != s.layers) {
      return Bad("scored_layers",
                 absl::StrCat(c.scored_layers.size(),
                              " layers listed for shape.layers ", s.layers));
    }
    for (size_t i = 0; i < c.scored_layers.size(); ++i) {
      const int32_t l = c.scored_layers[i];
      if (l < 0 || l >= kMaxDimension ||
          (i > 0 && l <= c.scored_layers[i - 1])) {
        return Bad("scored_layers",
                   absl::StrCat("entry ", i, " (", l,
                                ") is negative, too large or not above the "
                                "one before (the list must be strictly "
                                "increasing)"));
      }
    }
  }
  if (c.placement != Placement::kCpu && c.placement != Placement::kGpu &&
      c.placement != Placement::kAuto) {
    return Bad("placement", "unknown placement");
  }
  return absl::OkStatus();
}

// The demote tier (docs/step-semantics.md section 12): its ranges always,
// and with a tier, the policies whose tier is defined.
absl::Status ValidateTier(const SessionConfig& c) {
  const TierParams& t = c.tier;
  if (t.capacity < 0 || t.capacity > kMaxBudget) {
    return Bad("tier.capacity",
               absl::StrCat(t.capacity, " is outside [0, 2^40] (0: no tier)"));
  }
  if (!(t.promote_margin >= 0.0) || !std::isfinite(t.promote_margin)) {
    return Bad("tier.promote_margin",
               absl::StrCat(t.promote_margin, " is not finite and >= 0"));
  }
  if (t.max_promotions < 0 || t.max_promotions > kMaxBudget) {
    return Bad("tier.max_promotions",
               absl::StrCat(t.max_promotions, " is outside [0, 2^40]"));
  }
  if (t.capacity == 0) return absl::OkStatus();
  if (!RankingHasScores(c.ranking)) {
    return Bad("tier.capacity",
               absl::StrCat("ranking ", std::string(RankingName(c.ranking)),
                            " scores by append index: a demoted entry is "
                            "older than every live candidate and could "
                            "never be promoted"));
  }
  if (c.budget_control == BudgetControl::kThreshold) {
    return Bad("tier.capacity",
               "the threshold budget control sets the live count by tau, "
               "not by the budget the tier's moves are defined against");
  }
  if (c.block_size > 1) {
    return Bad("tier.capacity",
               absl::StrCat("block_size ", c.block_size,
                            ": blocks are evicted whole, and demoting "
                            "blocks is not defined (token granularity "
                            "only)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSessionConfig(const SessionConfig& c) {
  if (absl::Status st = ValidateShape(c); !st.ok()) return st;
  if (absl::Status st = ValidatePolicyParams(c); !st.ok()) return st;
  if (absl::Status st = ValidateGranularity(c); !st.ok()) return st;
  return ValidateTier(c);
}

bool PolicyNeedsEntropy(const SessionConfig& config) {
  return config.ranking == Ranking::kAffinity ||
         config.ranking == Ranking::kBirth ||
         config.budget_control == BudgetControl::kEntropy;
}

bool RankingNeedsPerHeadQueries(Ranking ranking) {
  return ranking == Ranking::kH2o || ranking == Ranking::kTova ||
         ranking == Ranking::kExpected || ranking == Ranking::kBirth ||
         ranking == Ranking::kRkv;
}

bool RankingHasScores(Ranking ranking) {
  return ranking != Ranking::kWindow && ranking != Ranking::kStreaming;
}

std::vector<std::pair<Ranking, BudgetControl>> AllPolicies() {
  std::vector<std::pair<Ranking, BudgetControl>> out;
  for (Ranking ranking : kAllRankings) {
    for (BudgetControl control : kAllBudgetControls) {
      if (control == BudgetControl::kThreshold && !RankingHasScores(ranking)) {
        continue;
      }
      out.emplace_back(ranking, control);
    }
  }
  return out;
}

bool RankingNeedsQueries(Ranking ranking) {
  return ranking != Ranking::kKeyDiff;
}

std::vector<int32_t> DefaultScoredLayers(int32_t model_layers) {
  std::vector<int32_t> layers;
  if (model_layers <= 4) {
    for (int32_t l = 0; l < model_layers; ++l) layers.push_back(l);
    return layers;
  }
  for (int32_t i = 0; i < 4; ++i) {
    layers.push_back(
        static_cast<int32_t>((int64_t{2} * i + 1) * model_layers / 8));
  }
  return layers;
}

absl::Status ApplySketchName(std::string_view name, Shape* shape) {
  if (name == "exact") {
    shape->sketch_dim = 0;
    return absl::OkStatus();
  }
  constexpr std::string_view kPrefix = "project:";
  int32_t r = 0;
  if (name.substr(0, kPrefix.size()) != kPrefix ||
      !absl::SimpleAtoi(absl::string_view(name.data() + kPrefix.size(),
                                          name.size() - kPrefix.size()),
                        &r) ||
      r < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sketch: unknown sketch \"", std::string(name),
                     "\" (want \"exact\" or \"project:R\" with R >= 1)"));
  }
  shape->sketch_dim = r;
  return absl::OkStatus();
}

std::string SketchName(const Shape& shape) {
  return shape.sketch_dim > 0 ? absl::StrCat("project:", shape.sketch_dim)
                              : std::string("exact");
}

std::string_view QueryFormName(QueryForm form) {
  switch (form) {
    case QueryForm::kPerHead:
      return "per_head";
    case QueryForm::kGroupSum:
      return "group_sum";
  }
  return "unknown";
}

bool ParseQueryForm(std::string_view name, QueryForm* form) {
  constexpr QueryForm kAll[] = {QueryForm::kPerHead, QueryForm::kGroupSum};
  return ParseByName(name, kAll, &QueryFormName, form);
}

std::string_view RankingName(Ranking ranking) {
  switch (ranking) {
    case Ranking::kWindow:
      return "window";
    case Ranking::kStreaming:
      return "streaming";
    case Ranking::kH2o:
      return "h2o";
    case Ranking::kTova:
      return "tova";
    case Ranking::kKeyNorm:
      return "keynorm";
    case Ranking::kRandom:
      return "random";
    case Ranking::kAffinity:
      return "affinity";
    case Ranking::kKeyDiff:
      return "keydiff";
    case Ranking::kExpected:
      return "expected";
    case Ranking::kBirth:
      return "birth";
    case Ranking::kRkv:
      return "rkv";
  }
  return "unknown";
}

bool ParseRanking(std::string_view name, Ranking* ranking) {
  return ParseByName(name, kAllRankings, &RankingName, ranking);
}

std::string_view BudgetControlName(BudgetControl control) {
  switch (control) {
    case BudgetControl::kFixed:
      return "fixed";
    case BudgetControl::kEntropy:
      return "entropy";
    case BudgetControl::kThreshold:
      return "threshold";
  }
  return "unknown";
}

bool ParseBudgetControl(std::string_view name, BudgetControl* control) {
  return ParseByName(name, kAllBudgetControls, &BudgetControlName, control);
}

std::string_view AffinityUpdateName(AffinityUpdate update) {
  switch (update) {
    case AffinityUpdate::kSeed:
      return "seed";
    case AffinityUpdate::kLogitEma:
      return "logit_ema";
  }
  return "unknown";
}

bool ParseAffinityUpdate(std::string_view name, AffinityUpdate* update) {
  return ParseByName(name, kAllAffinityUpdates, &AffinityUpdateName, update);
}

std::string_view PlacementName(Placement placement) {
  switch (placement) {
    case Placement::kCpu:
      return "cpu";
    case Placement::kGpu:
      return "gpu";
    case Placement::kAuto:
      return "auto";
  }
  return "unknown";
}

bool ParsePlacement(std::string_view name, Placement* placement) {
  return ParseByName(name, kAllPlacements, &PlacementName, placement);
}

absl::Status ApplyPolicyName(std::string_view name, SessionConfig* config) {
  if (name == "entropy") {
    config->ranking = Ranking::kAffinity;
    config->budget_control = BudgetControl::kEntropy;
    return absl::OkStatus();
  }
  std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(name.data(), name.size()), '+');
  Ranking ranking;
  BudgetControl control = BudgetControl::kFixed;
  if (parts.size() > 2 || !ParseRanking(parts[0], &ranking) ||
      (parts.size() == 2 && !ParseBudgetControl(parts[1], &control))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy: unknown policy \"", std::string(name),
        "\" (want RANKING[+fixed|+entropy|+threshold] or \"entropy\"; "
        "rankings: window, "
        "streaming, h2o, tova, keynorm, random, affinity, keydiff, expected, "
        "birth, rkv)"));
  }
  config->ranking = ranking;
  config->budget_control = control;
  return absl::OkStatus();
}

std::string PolicyName(const SessionConfig& config) {
  return std::string(RankingName(config.ranking)) + "+" +
         std::string(BudgetControlName(config.budget_control));
}

}  // namespace entrokv
