// Quality metrics of a kept set against the full cache (docs/design.md "Quality
// metrics"), computed in double precision from float keys, values and queries.
// Pure functions, thread-safe.

#ifndef ENTROKV_CORE_METRICS_H_
#define ENTROKV_CORE_METRICS_H_

#include <cstdint>

#include "absl/types/span.h"
#include "entrokv/core/config.h"

namespace entrokv {

struct QualityMetrics {
  // ‖o_full − o_kept‖ / ‖o_full‖, averaged over layers and q heads.
  double memory_error = 0.0;
  // Full-cache attention mass on live entries, averaged over layers, q heads.
  double attention_recall = 1.0;
  // The memory error to first order in the evicted attention mass 1 − R:
  // (1 − R)·‖ō_ev − o_full‖ / ‖o_full‖, with ō_ev the attention output over
  // the evicted entries alone, averaged like memory_error. The exact error is
  // this divided by R (docs/simulator.md derives both).
  double first_order_error = 0.0;
};

// `keys` and `values` hold n entries × shape.key_elements() floats
// ([entry][layer][kv_head][head_dim]); `queries` shape.query_elements();
// `live` n flags. Entries that are not live count only in o_full.
// REQUIRES: sizes as above, n >= 1 and at least one live entry.
QualityMetrics ComputeQuality(const Shape& shape, absl::Span<const float> keys,
                              absl::Span<const float> values,
                              absl::Span<const float> queries,
                              absl::Span<const uint8_t> live);

}  // namespace entrokv

#endif  // ENTROKV_CORE_METRICS_H_
