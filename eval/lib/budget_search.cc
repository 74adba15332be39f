#include "eval/lib/budget_search.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace entrokv::eval {

absl::StatusOr<BudgetSearchResult> SearchBudget(
    const BudgetSearchOptions& options, const MeanLiveAt& mean_live_at,
    std::map<int64_t, double>* known) {
  const double target = options.target;
  const int64_t min_budget = options.min_budget;
  const int64_t max_budget = options.max_budget;
  assert(1 <= min_budget && min_budget <= max_budget);
  BudgetSearchResult result;
  auto mean = [&](int64_t b) { return known->at(b); };
  for (int iteration = 0;; ++iteration) {
    // The nearest budgets on either side, and the closest hit.
    int64_t lo = -1, hi = -1, hit = -1;
    for (const auto& [b, m] : *known) {
      if (m <= target) {
        if (lo < 0 || b > lo) lo = b;
      } else if (hi < 0 || b < hi) {
        hi = b;
      }
      if (std::abs(m - target) <= options.tolerance &&
          (hit < 0 || std::abs(m - target) < std::abs(mean(hit) - target))) {
        hit = b;
      }
    }
    if (hit >= 0) {
      result.hit = hit;
      return result;
    }
    if (lo >= 0 && hi >= 0 && hi - lo <= 1) {
      result.lo = lo;
      result.hi = hi;
      return result;
    }
    if (iteration > 60) {
      return absl::InternalError(absl::StrCat("budget search for mean live ",
                                              target, " did not converge (lo ",
                                              lo, ", hi ", hi, ")"));
    }
    int64_t next;
    const int64_t guess =
        std::clamp<int64_t>(options.first_guess, min_budget, max_budget);
    if (iteration == 0 && options.first_guess > 0 && known->count(guess) == 0 &&
        (lo < 0 || guess > lo) && (hi < 0 || guess < hi)) {
      next = guess;
    } else if (lo >= 0 && hi >= 0) {
      const double x = lo + (target - mean(lo)) * (hi - lo) /
                                std::max(mean(hi) - mean(lo), 1e-9);
      next = iteration < options.secant_iterations ? std::llround(x)
                                                   : lo + (hi - lo) / 2;
      next = std::clamp<int64_t>(next, lo + 1, hi - 1);
    } else if (lo >= 0) {
      if (lo >= max_budget) return result;
      const double slope = std::max(mean(lo) / static_cast<double>(lo), 0.25);
      next =
          lo + std::max<int64_t>(1, std::llround((target - mean(lo)) / slope));
      next = std::min(next, max_budget);
    } else if (hi >= 0) {
      if (hi <= min_budget) return result;
      const double slope = std::max(mean(hi) / static_cast<double>(hi), 0.25);
      next =
          hi - std::max<int64_t>(1, std::llround((mean(hi) - target) / slope));
      next = std::max(next, min_budget);
    } else {
      next = std::clamp<int64_t>(std::llround(target), min_budget, max_budget);
    }
    absl::StatusOr<double> m = mean_live_at(next);
    if (!m.ok()) return m.status();
    (*known)[next] = *m;
    ++result.probes;
  }
}

absl::StatusOr<int64_t> BisectNearestBudget(double target, int64_t lo,
                                            int64_t hi,
                                            const MeanLiveAt& mean_live_at) {
  int64_t best = lo;
  double best_gap = std::numeric_limits<double>::infinity();
  while (lo <= hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    absl::StatusOr<double> m = mean_live_at(mid);
    if (!m.ok()) return m.status();
    if (std::fabs(*m - target) < best_gap) {
      best_gap = std::fabs(*m - target);
      best = mid;
    }
    if (*m < target) {
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

}  // namespace entrokv::eval
