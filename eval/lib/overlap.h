// Agreement of two policies' evictions over the same sequence: the Jaccard
// index of the entries each ever evicts, and of the entries each holds live
// at every step. Both evaluations compare a cheaper-scoring variant with the
// same policy scored exactly this way, at the same nominal budget
// (docs/fidelity.md): entrokv-eval story by story, entrokv-sim over its
// stream.
//
// A sequence's evictions are given as a timeline: evicted_at[p] is the first
// step at which entry p, appended at step p, is no longer live, or a `never`
// value that no step reaches. Entry p is live at step t when
// p <= t < evicted_at[p]. `Step` is the timeline's integer type.
//
// Thread-safety: pure functions.

#ifndef ENTROKV_EVAL_LIB_OVERLAP_H_
#define ENTROKV_EVAL_LIB_OVERLAP_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace entrokv::eval {

// |A ∩ B| / |A ∪ B| from the two counts; 1 when both sets are empty.
inline double Jaccard(int64_t both, int64_t either) {
  return either == 0 ? 1.0
                     : static_cast<double>(both) / static_cast<double>(either);
}

// The Jaccard index of the sets of entries that `x` and `y` ever evict
// (evicted_at != never), over the first min(x.size(), y.size()) entries.
template <typename Step>
double EvictedSetJaccard(const std::vector<Step>& x, const std::vector<Step>& y,
                         Step never) {
  const size_t n = std::min(x.size(), y.size());
  int64_t both = 0, either = 0;
  for (size_t p = 0; p < n; ++p) {
    const bool ex = x[p] != never, ey = y[p] != never;
    both += ex && ey;
    either += ex || ey;
  }
  return Jaccard(both, either);
}

// For each step t < n = min(x.size(), y.size()) in order, adds to *sum the
// Jaccard index of the sets of entries live at t under `x` and under `y`.
// Returns n, the number of terms added. (A running sum across sequences is
// passed in, not added afterwards, so that every term is added in order.)
template <typename Step>
int64_t AddLiveSetJaccards(const std::vector<Step>& x,
                           const std::vector<Step>& y, double* sum) {
  const size_t n = std::min(x.size(), y.size());
  for (size_t t = 0; t < n; ++t) {
    int64_t in_both = 0, in_either = 0;
    for (size_t p = 0; p <= t; ++p) {
      const bool lx = x[p] > static_cast<Step>(t);
      const bool ly = y[p] > static_cast<Step>(t);
      in_both += lx && ly;
      in_either += lx || ly;
    }
    *sum += Jaccard(in_both, in_either);
  }
  return static_cast<int64_t>(n);
}

}  // namespace entrokv::eval

#endif  // ENTROKV_EVAL_LIB_OVERLAP_H_
