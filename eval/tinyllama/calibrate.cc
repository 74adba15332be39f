#include "tinyllama/calibrate.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace entrokv::tinyllama {

absl::StatusOr<BudgetSearchResult> SearchBudget(
    double target, double tolerance, int64_t min_budget, int64_t max_budget,
    int64_t first_guess,
    const std::function<absl::StatusOr<double>(int64_t budget)>& mean_live_at,
    std::map<int64_t, double>* known) {
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
      if (std::abs(m - target) <= tolerance &&
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
        std::clamp<int64_t>(first_guess, min_budget, max_budget);
    if (iteration == 0 && first_guess > 0 && known->count(guess) == 0 &&
        (lo < 0 || guess > lo) && (hi < 0 || guess < hi)) {
      next = guess;
    } else if (lo >= 0 && hi >= 0) {
      const double x = lo + (target - mean(lo)) * (hi - lo) /
                                std::max(mean(hi) - mean(lo), 1e-9);
      next = iteration < 8 ? std::llround(x) : lo + (hi - lo) / 2;
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

PairedDifference PairedBootstrap(const std::vector<double>& a,
                                 const std::vector<double>& b,
                                 const std::vector<int64_t>& tokens,
                                 int resamples, uint64_t seed, double level) {
  assert(!a.empty() && a.size() == b.size() && a.size() == tokens.size());
  assert(resamples >= 1 && level > 0.0 && level < 1.0);
  const size_t n = a.size();
  auto pct = [](double d, double t) { return 100.0 * (std::exp(d / t) - 1.0); };
  PairedDifference out;
  double d = 0.0, t = 0.0;
  for (size_t s = 0; s < n; ++s) {
    d += b[s] - a[s];
    t += static_cast<double>(tokens[s]);
  }
  out.pct = pct(d, t);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::vector<double> draws(resamples);
  for (int r = 0; r < resamples; ++r) {
    double rd = 0.0, rt = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const size_t s = pick(rng);
      rd += b[s] - a[s];
      rt += static_cast<double>(tokens[s]);
    }
    draws[r] = pct(rd, rt);
  }
  std::sort(draws.begin(), draws.end());
  auto quantile = [&](double q) {
    const int64_t rank = static_cast<int64_t>(std::ceil(q * resamples));
    return draws[std::clamp<int64_t>(rank - 1, 0, resamples - 1)];
  };
  out.lo_pct = quantile((1.0 - level) / 2.0);
  out.hi_pct = quantile((1.0 + level) / 2.0);
  return out;
}

StorySplit SplitStories(int total, int tune, int test) {
  StorySplit split;
  total = std::max(total, 0);
  const int tune_end = std::clamp(tune, 0, total);
  const int test_end =
      test > 0 ? std::min(total, tune_end + test) : std::max(total, tune_end);
  for (int i = 0; i < tune_end; ++i) split.tune.push_back(i);
  for (int i = tune_end; i < test_end; ++i) split.test.push_back(i);
  return split;
}

}  // namespace entrokv::tinyllama
