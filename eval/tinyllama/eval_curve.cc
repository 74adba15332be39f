#include "tinyllama/eval_curve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "entrokv/core/status_macros.h"
#include "eval/lib/interpolate.h"
#include "scoring_variant.h"
#include "tinyllama/eval_policies.h"
#include "tinyllama/evaluator.h"

namespace entrokv::tinyllama {

SessionConfig AtBudget(SessionConfig config, int64_t budget,
                       bool cap_at_budget) {
  config = AtBudget(std::move(config), budget);  // eval_policies.h: tau too.
  return cap_at_budget ? CapAtBudget(std::move(config)) : config;
}

absl::StatusOr<const Run*> CurveSearch::At(Curve* curve, int64_t budget) {
  auto it = curve->runs.find(budget);
  if (it != curve->runs.end()) return &it->second;
  Run run;
  run.config = AtBudget(curve->config, budget, curve->cap_at_budget);
  run.policy = PolicyName(run.config);
  run.variant = VariantLabel(run.config);
  run.record_evictions = record_evictions_;
  run.key_tokens = key_tokens_;
  ENTROKV_RETURN_IF_ERROR(Evaluate(model_, stories_, decider_, &run));
  std::printf(
      "%-18s %-22s B=%-4lld ppl %8.4f  mean live %6.2f  peak %4lld"
      "  (%.1fs)\n",
      run.policy.c_str(),
      (curve->label.empty() ? run.variant : curve->label).c_str(),
      static_cast<long long>(budget), run.ppl(), run.mean_live(),
      static_cast<long long>(run.peak_live), run.seconds);
  std::fflush(stdout);
  return &curve->runs.emplace(budget, std::move(run)).first->second;
}

absl::StatusOr<eval::BudgetSearchResult> CurveSearch::Search(
    Curve* curve, double target, double tolerance, int64_t first_guess) {
  eval::BudgetSearchOptions options;
  options.target = target;
  options.tolerance = tolerance;
  options.min_budget = MinBudget(curve->config);
  options.max_budget = model_.config().seq_len;  // Evicts nothing.
  options.first_guess = first_guess;
  std::map<int64_t, double> known;
  for (const auto& [b, r] : curve->runs) known[b] = r.mean_live();
  return eval::SearchBudget(
      options,
      [&](int64_t b) -> absl::StatusOr<double> {
        ENTROKV_ASSIGN_OR_RETURN(const Run* r, At(curve, b));
        return r->mean_live();
      },
      &known);
}

absl::StatusOr<Bracket> CurveSearch::Find(Curve* curve, double target) {
  ENTROKV_ASSIGN_OR_RETURN(eval::BudgetSearchResult found,
                           Search(curve, target, 0.0, 0));
  if (!found.found()) return Bracket{};
  Bracket bracket;
  bracket.lo = &curve->runs.at(found.lo);
  bracket.hi = &curve->runs.at(found.hi);
  bracket.ppl = PplAtMeanLive({bracket.lo, bracket.hi}, target);
  return bracket;
}

absl::StatusOr<Point> CurveSearch::Calibrate(Curve* curve, double target,
                                             double tolerance,
                                             int64_t first_guess) {
  ENTROKV_ASSIGN_OR_RETURN(eval::BudgetSearchResult found,
                           Search(curve, target, tolerance, first_guess));
  Point p;
  if (found.hit >= 0) {
    p = Combine({&curve->runs.at(found.hit)}, 0.0);
  } else if (found.found()) {
    const Run& lo = curve->runs.at(found.lo);
    const Run& hi = curve->runs.at(found.hi);
    p = Combine({&lo, &hi}, eval::InterpolationWeight(lo.mean_live(),
                                                      hi.mean_live(), target));
  }
  p.probes = found.probes;
  return p;
}

absl::StatusOr<Point> CurveSearch::AtBudgetsOf(Curve* curve,
                                               const Point& like) {
  std::vector<const Run*> runs;
  for (const Run* r : like.runs) {
    ENTROKV_ASSIGN_OR_RETURN(const Run* mine, At(curve, r->config.budget));
    runs.push_back(mine);
  }
  if (runs.empty()) return Point{};
  return Combine(std::move(runs), like.weight);
}

Point Combine(std::vector<const Run*> runs, double weight) {
  Point p;
  p.runs = std::move(runs);
  const Run& lo = *p.runs.front();
  const Run& hi = *p.runs.back();
  const double w = p.runs.size() == 2 ? weight : 0.0;
  p.weight = w;
  p.mean_live = eval::Lerp(lo.mean_live(), hi.mean_live(), w);
  p.story_nll = eval::LerpEach(lo.story_nll, hi.story_nll, w);
  p.story_key_nll = eval::LerpEach(lo.story_key_nll, hi.story_key_nll, w);
  p.story_tokens = lo.story_tokens;
  p.story_key_tokens = lo.story_key_tokens;
  p.story_recall.resize(lo.story_recall.size());
  for (size_t s = 0; s < lo.story_recall.size(); ++s) {
    const StoryRecall& a = lo.story_recall[s];
    const StoryRecall& b = hi.story_recall[s];
    p.story_recall[s] = StoryRecall{eval::Lerp(a.steps, b.steps, w),
                                    eval::Lerp(a.sum, b.sum, w),
                                    eval::Lerp(a.log_sum, b.log_sum, w),
                                    eval::Lerp(a.oracle_sum, b.oracle_sum, w)};
  }
  auto pooled = [](const std::vector<double>& nll,
                   const std::vector<int64_t>& tokens) {
    double sum = 0.0;
    int64_t count = 0;
    for (size_t s = 0; s < nll.size(); ++s) {
      sum += nll[s];
      count += tokens[s];
    }
    return count > 0 ? std::exp(sum / static_cast<double>(count))
                     : std::numeric_limits<double>::quiet_NaN();
  };
  p.ppl = pooled(p.story_nll, p.story_tokens);
  p.long_ppl = pooled(p.story_key_nll, p.story_key_tokens);
  for (const Run* r : p.runs) p.peak_live = std::max(p.peak_live, r->peak_live);
  return p;
}

double PplAtMeanLive(std::vector<const Run*> points, double target) {
  std::sort(points.begin(), points.end(), [](const Run* a, const Run* b) {
    return a->mean_live() < b->mean_live();
  });
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const double x0 = points[i]->mean_live(), x1 = points[i + 1]->mean_live();
    if (target >= x0 && target <= x1) {
      return std::exp(eval::Lerp(std::log(points[i]->ppl()),
                                 std::log(points[i + 1]->ppl()),
                                 eval::InterpolationWeight(x0, x1, target)));
    }
  }
  if (points.size() == 1 && points[0]->mean_live() == target) {
    return points[0]->ppl();
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace entrokv::tinyllama
