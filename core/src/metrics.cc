#include "entrokv/core/metrics.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace entrokv {

QualityMetrics ComputeQuality(const Shape& shape, absl::Span<const float> keys,
                              absl::Span<const float> values,
                              absl::Span<const float> queries,
                              absl::Span<const uint8_t> live) {
  const int64_t n = static_cast<int64_t>(live.size());
  const int32_t d = shape.head_dim;
  const int32_t group = shape.group_size();
  const int64_t per_entry = shape.key_elements();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> z(static_cast<size_t>(n));
  std::vector<double> o_full(static_cast<size_t>(d));
  std::vector<double> o_kept(static_cast<size_t>(d));
  double error_sum = 0.0;
  double recall_sum = 0.0;
  double first_order_sum = 0.0;
  for (int32_t l = 0; l < shape.layers; ++l) {
    for (int32_t h = 0; h < shape.q_heads; ++h) {
      const int32_t kv = h / group;
      const float* q = queries.data() + (int64_t{l} * shape.q_heads + h) * d;
      const int64_t off = (int64_t{l} * shape.kv_heads + kv) * d;
      double max = -INFINITY;
      for (int64_t i = 0; i < n; ++i) {
        const float* k = keys.data() + i * per_entry + off;
        double dot = 0.0;
        for (int32_t j = 0; j < d; ++j) dot += double{q[j]} * k[j];
        z[i] = dot * scale;
        max = std::max(max, z[i]);
      }
      std::fill(o_full.begin(), o_full.end(), 0.0);
      std::fill(o_kept.begin(), o_kept.end(), 0.0);
      double mass_full = 0.0;
      double mass_kept = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double w = std::exp(z[i] - max);
        const float* v = values.data() + i * per_entry + off;
        mass_full += w;
        for (int32_t j = 0; j < d; ++j) o_full[j] += w * v[j];
        if (live[i]) {
          mass_kept += w;
          for (int32_t j = 0; j < d; ++j) o_kept[j] += w * v[j];
        }
      }
      const double mass_ev = mass_full - mass_kept;
      double diff = 0.0;
      double diff_ev = 0.0;
      double norm = 0.0;
      for (int32_t j = 0; j < d; ++j) {
        const double full = o_full[j] / mass_full;
        const double kept = mass_kept > 0.0 ? o_kept[j] / mass_kept : 0.0;
        const double ev =
            mass_ev > 0.0 ? (o_full[j] - o_kept[j]) / mass_ev : full;
        diff += (full - kept) * (full - kept);
        diff_ev += (ev - full) * (ev - full);
        norm += full * full;
      }
      const double recall = mass_kept / mass_full;
      if (norm > 0.0) {
        error_sum += std::sqrt(diff / norm);
        first_order_sum += (1.0 - recall) * std::sqrt(diff_ev / norm);
      }
      recall_sum += recall;
    }
  }
  const double rows =
      static_cast<double>(int64_t{shape.layers} * shape.q_heads);
  return {.memory_error = error_sum / rows,
          .attention_recall = recall_sum / rows,
          .first_order_error = first_order_sum / rows};
}

}  // namespace entrokv
