#include "tinyllama/calibrate.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <random>

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
