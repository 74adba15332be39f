// Interpolation at a target mean live: a quantity measured at two runs whose
// mean live entries bracket the target, taken linearly in mean live between
// them. Both evaluations interpolate this way between the adjacent nominal
// budgets a budget search returns (eval/lib/budget_search.h): entrokv-eval
// each story's NLL (so log-perplexity), entrokv-sim each step's memory
// error.
//
// The arithmetic is spelled out here once, in this order, so that every
// caller rounds alike.
//
// Thread-safety: pure functions.

#ifndef ENTROKV_EVAL_LIB_INTERPOLATE_H_
#define ENTROKV_EVAL_LIB_INTERPOLATE_H_

#include <cstddef>
#include <vector>

namespace entrokv::eval {

// The weight w of `x` between x0 and x1: x = x0 + w·(x1 − x0). 0 when
// x1 <= x0 (a degenerate bracket takes its lower end).
inline double InterpolationWeight(double x0, double x1, double x) {
  return x1 > x0 ? (x - x0) / (x1 - x0) : 0.0;
}

// y0 + w·(y1 − y0).
inline double Lerp(double y0, double y1, double w) {
  return y0 + w * (y1 - y0);
}

// Lerp of each element; as many elements as `y0`.
// REQUIRES: y1.size() >= y0.size().
inline std::vector<double> LerpEach(const std::vector<double>& y0,
                                    const std::vector<double>& y1, double w) {
  std::vector<double> y(y0.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = Lerp(y0[i], y1[i], w);
  return y;
}

}  // namespace entrokv::eval

#endif  // ENTROKV_EVAL_LIB_INTERPOLATE_H_
