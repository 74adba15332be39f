// Needle retention (issue #21 item 7; docs/simulator.md "Needles"): does a
// policy still hold an entry when, long after it was appended, a query comes
// that attends to it strongly?
//
// The stream is the simulator's synthetic one, one entry a step. Some entries
// are needles: their key, per (layer, kv head), is a random direction of its
// own with the norm of an ordinary key, so nothing marks it while it waits.
// `gap` steps later the step's query is that direction (scaled by
// `query_scale`), so the needle is what it attends to. A needle counts as
// retained when it is live as its query arrives, that is after the previous
// step's evictions. Pure function over core; thread-compatible.

#ifndef ENTROKV_SIM_NEEDLES_H_
#define ENTROKV_SIM_NEEDLES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "entrokv/core/config.h"
#include "entrokv/core/synthetic.h"

namespace entrokv::sim {

struct NeedleOptions {
  SyntheticParams stream;  // The shape is the policy's (f32, exact).
  int64_t entries = 32768;  // Steps; one entry each.
  int32_t needles = 64;     // Planted evenly over the first half.
  // Steps from a needle to its query, spread log-uniformly in
  // [min_gap, max_gap] by a seeded draw.
  int64_t min_gap = 256;
  int64_t max_gap = 8192;
  double query_scale = 3.0;  // Of the needle query, per element, × √d.
  uint64_t seed = 1;
};

struct NeedleResult {
  std::string policy;
  int64_t planted = 0;   // Needles whose query came within the run.
  int64_t retained = 0;  // Of those, live when their query came.
  double mean_live = 0.0;
  int64_t peak_live = 0;
};

// Runs `policy` (its shape f32, exact, per-head queries) over the needle
// stream. InvalidArgument for a bad option or shape.
absl::StatusOr<NeedleResult> RunNeedles(const SessionConfig& policy,
                                        const NeedleOptions& options);

}  // namespace entrokv::sim

#endif  // ENTROKV_SIM_NEEDLES_H_
