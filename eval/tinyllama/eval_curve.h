// Curves of entrokv-eval: one policy (and scoring variant) run at many
// nominal budgets over the same stories, and the searches that calibrate it
// to a target mean live entries (docs/design.md "Fair comparison"): a run
// within a tolerance of the target, or two adjacent budgets that bracket it,
// interpolated (eval/lib/budget_search.h, eval/lib/interpolate.h).
//
// Thread-safety: a Curve is owned by one thread at a time; CurveSearch is
// thread-compatible per curve (different threads may search different
// curves at once).

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_CURVE_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_CURVE_H_

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "entrokv/core/config.h"
#include "eval/lib/budget_search.h"
#include "tinyllama/decider.h"
#include "tinyllama/eval_run.h"
#include "tinyllama/model.h"

namespace entrokv::tinyllama {

// One configuration (policy + variant) at many nominal budgets, immediate
// mode, evictions recorded. Owned by one worker at a time.
struct Curve {
  SessionConfig config;
  std::map<int64_t, Run> runs;  // By nominal budget.
  std::string label;            // Printed instead of the variant when set.
  // Each run caps the entropy controller at its nominal budget
  // (entropy_budget.max_budget = B): B_t can fall below B, never rise above
  // it, so no run holds more than a fixed budget B would (the equal-peak
  // comparison, docs/results-tinystories.md "Equal peak").
  bool cap_at_budget = false;
};

// `config` at nominal budget `budget` (with a threshold's tau, eval_policies.h
// AtBudget), capped there when `cap_at_budget`.
SessionConfig AtBudget(SessionConfig config, int64_t budget,
                       bool cap_at_budget);

// Two adjacent nominal budgets whose mean live entries bracket a target, and
// the perplexity interpolated between them (null pointers and NaN when the
// target is outside what the budgets reach).
struct Bracket {
  const Run* lo = nullptr;  // mean live <= target.
  const Run* hi = nullptr;  // mean live > target, budget lo + 1.
  double ppl = std::numeric_limits<double>::quiet_NaN();
};

// A policy at a target mean live on a set of stories: one run whose mean live
// is within the tolerance of the target, or two runs at adjacent budgets that
// bracket it, interpolated (the same weight on every story's NLL, which is
// linear interpolation of log-perplexity).
struct Point {
  std::vector<const Run*> runs;  // 1 (hit) or 2 (lo, hi); empty: unreachable.
  double weight = 0.0;           // Of runs[1], when there are two.
  double ppl = std::numeric_limits<double>::quiet_NaN();
  double mean_live = std::numeric_limits<double>::quiet_NaN();
  int64_t peak_live = 0;
  int probes = 0;  // Runs this search added.
  std::vector<double> story_nll;
  std::vector<int64_t> story_tokens;
  std::vector<StoryRecall> story_recall;  // Interpolated as story_nll.
  // Long-range perplexity (long_ppl.h), when the runs scored key tokens:
  // per story Σ NLL over its key tokens (interpolated as story_nll, so
  // log LongPPL is linear in mean live) and their count; NaN and empty
  // otherwise.
  double long_ppl = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> story_key_nll;
  std::vector<int64_t> story_key_tokens;
  bool ok() const { return !runs.empty(); }
  std::string Budgets() const {
    if (runs.empty()) return "—";
    if (runs.size() == 1) return absl::StrCat(runs[0]->config.budget);
    return absl::StrCat(runs[0]->config.budget, "–", runs[1]->config.budget);
  }
};

// Runs of curves on one set of stories, evaluated on demand, and the budget
// searches on them: a curve's run at a budget is evaluated once and kept.
// A curve is used by one thread at a time; the decider is shared.
class CurveSearch {
 public:
  // `key_tokens`: per story, the key tokens every run scores (long_ppl.h);
  // null: none. Not owned; outlives the search.
  CurveSearch(const Model& model, const std::vector<std::vector<int>>& stories,
              Decider* decider, bool record_evictions = true,
              const std::vector<std::vector<uint8_t>>* key_tokens = nullptr)
      : model_(model),
        stories_(stories),
        decider_(decider),
        record_evictions_(record_evictions),
        key_tokens_(key_tokens) {}

  // The run of `curve` at `budget`, evaluated once (and a line on stdout).
  absl::StatusOr<const Run*> At(Curve* curve, int64_t budget);

  // Searches the nominal budget (eval::SearchBudget) from the runs the curve
  // has. `tolerance` in entries (0: until two adjacent budgets bracket
  // `target`).
  absl::StatusOr<eval::BudgetSearchResult> Search(Curve* curve, double target,
                                                  double tolerance,
                                                  int64_t first_guess);

  // Two adjacent budgets that bracket `target` (mean live grows with the
  // budget), and log-perplexity interpolated between them.
  absl::StatusOr<Bracket> Find(Curve* curve, double target);

  // The policy at `target` mean live, within `tolerance` entries or
  // interpolated between adjacent budgets.
  absl::StatusOr<Point> Calibrate(Curve* curve, double target, double tolerance,
                                  int64_t first_guess);

  // `curve` at the nominal budgets of `like` (another curve's point), its
  // runs combined with `like`'s weight: with a fixed budget, the same memory
  // at every step as `like`; with a capped controller (cap_at_budget), never
  // more. Unreachable (no runs) when `like` is.
  absl::StatusOr<Point> AtBudgetsOf(Curve* curve, const Point& like);

 private:
  const Model& model_;
  const std::vector<std::vector<int>>& stories_;
  Decider* decider_;
  bool record_evictions_;
  const std::vector<std::vector<uint8_t>>* key_tokens_;
};

// The point of `runs` (one, or two adjacent budgets lo, hi taken with
// `weight` on hi): per-story NLL, key-token NLL and recall interpolated,
// mean live likewise, the peak the larger of the runs'.
// REQUIRES: 1 or 2 runs over the same stories.
Point Combine(std::vector<const Run*> runs, double weight);

// Perplexity at `target` mean live entries: log-perplexity interpolated
// linearly in mean live between the two measured points around it; NaN when
// the target is outside the measured range.
double PplAtMeanLive(std::vector<const Run*> points, double target);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_CURVE_H_
