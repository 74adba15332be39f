// Budget search: the integer nominal budget at which a policy's run holds a
// target mean number of live entries, assuming mean live grows with the
// budget (docs/design.md "Fair comparison": policies are compared at equal
// MEAN live entries, not at equal nominal budgets). The one home of the
// searches both evaluations use: entrokv-eval (eval/tinyllama) and
// entrokv-sim (eval/sim).
//
// A search only asks for mean live at a budget, through a callback: it knows
// nothing of models, streams or sessions.
//
// Thread-safety: the functions are reentrant; they call their callback from
// the calling thread only.

#ifndef ENTROKV_EVAL_LIB_BUDGET_SEARCH_H_
#define ENTROKV_EVAL_LIB_BUDGET_SEARCH_H_

#include <cstdint>
#include <functional>
#include <map>

#include "absl/status/statusor.h"

namespace entrokv::eval {

// The mean live entries of a policy's run at a nominal budget.
using MeanLiveAt = std::function<absl::StatusOr<double>(int64_t budget)>;

// Where a budget search ended. Either a run landed within the tolerance of
// the target (`hit`), or two adjacent budgets bracket it: mean_live(lo) <=
// target < mean_live(hi), hi == lo + 1. All -1 when the target lies outside
// what budgets in [min_budget, max_budget] reach.
struct BudgetSearchResult {
  int64_t hit = -1;
  int64_t lo = -1;
  int64_t hi = -1;
  int probes = 0;  // Budgets evaluated by this search (not known before).
  bool found() const { return hit >= 0 || (lo >= 0 && hi >= 0); }
};

struct BudgetSearchOptions {
  double target = 0.0;  // Mean live entries.
  // Absolute, in entries: the search stops as soon as a known budget lies
  // within it of the target (0: only at the target exactly). Negative: no
  // budget is a hit; only a bracketing pair of adjacent budgets ends the
  // search.
  double tolerance = 0.0;
  // Probes are clamped to [min_budget, max_budget].
  int64_t min_budget = 1;
  int64_t max_budget = 1;
  // Probed first when not known yet and strictly between the nearest known
  // budgets on either side of the target (or on the open side); 0: none.
  int64_t first_guess = 0;
  // Between known budgets on either side, the search iterations (counted
  // from 0, every iteration included) below this take a secant step; the
  // later ones bisect. 0: bisection from the start.
  int secant_iterations = 8;
};

// Searches the budget whose run holds `options.target` mean live entries.
// `known` holds the mean live of budgets already evaluated (it is updated
// with every probe), so that searches for several targets on one curve share
// their runs. Each iteration takes the nearest known budgets on either side
// of the target (lo: the largest whose mean live is <= target; hi: the
// smallest above it) and probes: the first guess (see above); else between
// lo and hi a secant step on (budget, mean live), or the midpoint
// lo + (hi - lo) / 2 (see secant_iterations); from one side only, a step
// along the slope mean_live(b) / b (at least 0.25); with nothing known, the
// target rounded. It ends on a hit, on an adjacent pair, or unfound when the
// open side is at min_budget or max_budget already; InternalError after 60
// iterations.
// REQUIRES: 1 <= options.min_budget <= options.max_budget.
absl::StatusOr<BudgetSearchResult> SearchBudget(
    const BudgetSearchOptions& options, const MeanLiveAt& mean_live_at,
    std::map<int64_t, double>* known);

// The budget in [lo, hi] whose run's mean live is nearest `target`, by
// bisection on what is left of the range: the middle budget is probed, and
// the search goes on above it when its mean live is below the target, below
// it otherwise, until the range is empty. Of all budgets probed, the nearest
// wins (the first probed on a tie); `lo` when none was.
absl::StatusOr<int64_t> BisectNearestBudget(double target, int64_t lo,
                                            int64_t hi,
                                            const MeanLiveAt& mean_live_at);

// Of a bracketing pair of runs, whether the lower budget's mean live is the
// nearer to `target` (true on a tie): the nominal budget at which two
// policies are compared entry by entry.
inline bool LowerIsNearer(double lo_mean_live, double hi_mean_live,
                          double target) {
  return target - lo_mean_live <= hi_mean_live - target;
}

}  // namespace entrokv::eval

#endif  // ENTROKV_EVAL_LIB_BUDGET_SEARCH_H_
