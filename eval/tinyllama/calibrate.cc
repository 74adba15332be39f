#include "tinyllama/calibrate.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>

namespace entrokv::tinyllama {

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

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// 1-based ranks of `v`, ties given the mean of the ranks they span.
std::vector<double> Ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double mean = (static_cast<double>(i + j) + 2.0) / 2.0;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = mean;
    i = j + 1;
  }
  return rank;
}

// The nearest-rank quantiles of the finite values of `draws`, as
// PairedBootstrap takes them; NaN when none is finite.
void Interval(std::vector<double> draws, double level, RankAgreement* out) {
  draws.erase(std::remove_if(draws.begin(), draws.end(),
                             [](double d) { return !std::isfinite(d); }),
              draws.end());
  if (draws.empty()) {
    out->lo = out->hi = kNaN;
    return;
  }
  std::sort(draws.begin(), draws.end());
  const int64_t n = static_cast<int64_t>(draws.size());
  auto quantile = [&](double q) {
    const int64_t rank = static_cast<int64_t>(std::ceil(q * n));
    return draws[std::clamp<int64_t>(rank - 1, 0, n - 1)];
  };
  out->lo = quantile((1.0 - level) / 2.0);
  out->hi = quantile((1.0 + level) / 2.0);
}

// ρ pooled and within groups for the stories drawn `count[s]` times each.
std::pair<double, double> Agreement(const std::vector<RankedRun>& runs,
                                    const std::vector<int>& count,
                                    int* groups_defined) {
  std::vector<double> measure(runs.size()), neg_ppl(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    const RankedRun& r = runs[i];
    double nll = 0.0, tokens = 0.0, num = 0.0, den = 0.0;
    for (size_t s = 0; s < count.size(); ++s) {
      if (count[s] == 0) continue;
      const double c = count[s];
      nll += c * r.nll[s];
      tokens += c * static_cast<double>(r.tokens[s]);
      num += c * r.num[s];
      den += c * r.den[s];
    }
    measure[i] = num / den;
    neg_ppl[i] = -std::exp(nll / tokens);
  }
  const double pooled = SpearmanRho(measure, neg_ppl);
  std::map<int, std::pair<std::vector<double>, std::vector<double>>> by_group;
  for (size_t i = 0; i < runs.size(); ++i) {
    by_group[runs[i].group].first.push_back(measure[i]);
    by_group[runs[i].group].second.push_back(neg_ppl[i]);
  }
  double sum = 0.0;
  int defined = 0;
  for (const auto& [group, xy] : by_group) {
    const double rho = SpearmanRho(xy.first, xy.second);
    if (std::isnan(rho)) continue;
    sum += rho;
    ++defined;
  }
  if (groups_defined != nullptr) *groups_defined = defined;
  return {pooled, defined > 0 ? sum / defined : kNaN};
}

}  // namespace

double SpearmanRho(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) return kNaN;
  auto finite = [](double v) { return std::isfinite(v); };
  if (!std::all_of(x.begin(), x.end(), finite) ||
      !std::all_of(y.begin(), y.end(), finite)) {
    return kNaN;
  }
  const std::vector<double> rx = Ranks(x), ry = Ranks(y);
  const double n = static_cast<double>(x.size());
  const double mean = (n + 1.0) / 2.0;  // Of any set of ranks.
  double sxy = 0.0, sxx = 0.0, syy = 0.0;
  for (size_t i = 0; i < rx.size(); ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  if (sxx == 0.0 || syy == 0.0) return kNaN;
  return sxy / std::sqrt(sxx * syy);
}

MeasureAgreement RankAgreementBootstrap(const std::vector<RankedRun>& runs,
                                        int resamples, uint64_t seed,
                                        double level) {
  assert(!runs.empty() && !runs[0].nll.empty());
  assert(resamples >= 1 && level > 0.0 && level < 1.0);
  const size_t n = runs[0].nll.size();
  MeasureAgreement out;
  std::vector<int> count(n, 1);
  std::tie(out.pooled.rho, out.within.rho) =
      Agreement(runs, count, &out.groups);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::vector<double> pooled(resamples), within(resamples);
  for (int r = 0; r < resamples; ++r) {
    std::fill(count.begin(), count.end(), 0);
    for (size_t i = 0; i < n; ++i) ++count[pick(rng)];
    std::tie(pooled[r], within[r]) = Agreement(runs, count, nullptr);
  }
  Interval(std::move(pooled), level, &out.pooled);
  Interval(std::move(within), level, &out.within);
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
