#include "key_stats.h"

#include <algorithm>
#include <cmath>

namespace entrokv::internal {
namespace {

const std::byte* Row(const KeyPlanes& k, int32_t plane, int64_t pos) {
  return k.keys + ((int64_t{plane} * k.capacity + pos) * k.dim) *
                      static_cast<int64_t>(ElementSize(k.type));
}

// Decodes the key at (plane, pos) into `row` (dim floats) and returns
// 1/‖k‖ (Σ k² in double, in order), 0 for a zero key.
double DecodeInverseNorm(const KeyPlanes& k, int32_t plane, int64_t pos,
                         float* row) {
  DecodeElements(k.type, Row(k, plane, pos), static_cast<size_t>(k.dim), row);
  double sq = 0.0;
  for (int32_t j = 0; j < k.dim; ++j) sq += double{row[j]} * row[j];
  const double norm = std::sqrt(sq);
  return norm > 0.0 ? 1.0 / norm : 0.0;
}

}  // namespace

void KeyDiffScores(const KeyPlanes& keys, std::vector<double>* out,
                   std::vector<double>* scratch,
                   std::vector<float>* row_scratch) {
  const int64_t n = keys.live;
  const int32_t d = keys.dim;
  out->assign(static_cast<size_t>(n), 0.0);
  if (n == 0) return;
  // scratch: the anchor and the per-position inverse norms.
  scratch->resize(static_cast<size_t>(d + n));
  double* anchor = scratch->data();
  double* inv_norm = anchor + d;
  row_scratch->resize(static_cast<size_t>(d));
  float* row = row_scratch->data();
  for (int32_t plane = 0; plane < keys.planes; ++plane) {
    std::fill(anchor, anchor + d, 0.0);
    for (int64_t p = 0; p < n; ++p) {
      inv_norm[p] = DecodeInverseNorm(keys, plane, p, row);
      for (int32_t j = 0; j < d; ++j) anchor[j] += row[j] * inv_norm[p];
    }
    double anchor_sq = 0.0;
    for (int32_t j = 0; j < d; ++j) {
      anchor[j] /= static_cast<double>(n);
      anchor_sq += anchor[j] * anchor[j];
    }
    const double anchor_norm = std::sqrt(anchor_sq);
    if (anchor_norm == 0.0) continue;  // Every cosine is 0.
    for (int64_t p = 0; p < n; ++p) {
      if (inv_norm[p] == 0.0) continue;
      DecodeElements(keys.type, Row(keys, plane, p), static_cast<size_t>(d),
                     row);
      double dot = 0.0;
      for (int32_t j = 0; j < d; ++j) dot += row[j] * anchor[j];
      (*out)[p] -= dot * inv_norm[p] / anchor_norm;
    }
  }
  for (double& v : *out) v /= static_cast<double>(keys.planes);
}

void RedundancyRows(const int64_t* index, int64_t live, int64_t sample,
                    std::vector<int32_t>* rows) {
  rows->resize(static_cast<size_t>(live));
  for (int64_t p = 0; p < live; ++p) (*rows)[p] = static_cast<int32_t>(p);
  std::sort(rows->begin(), rows->end(),
            [index](int32_t a, int32_t b) { return index[a] < index[b]; });
  if (live <= sample) return;
  for (int64_t t = 0; t < sample; ++t) {
    (*rows)[t] = (*rows)[t * live / sample];  // Ranks ascend: never ahead.
  }
  rows->resize(static_cast<size_t>(sample));
}

void RedundancyScores(const KeyPlanes& keys, const int64_t* index,
                      const std::vector<int32_t>& rows,
                      std::vector<double>* out, RedundancyScratch* scratch) {
  const int64_t n = keys.live;
  const int32_t d = keys.dim;
  out->assign(static_cast<size_t>(n), 0.0);
  if (n == 0) return;
  scratch->decoded.resize(static_cast<size_t>(n * d));
  scratch->inv_norm.resize(static_cast<size_t>(n));
  scratch->cos.resize(static_cast<size_t>(n));
  scratch->r.resize(static_cast<size_t>(n));
  float* x = scratch->decoded.data();
  double* inv_norm = scratch->inv_norm.data();
  double* cos = scratch->cos.data();
  double* r = scratch->r.data();
  const double row_count = static_cast<double>(rows.size());
  for (int32_t plane = 0; plane < keys.planes; ++plane) {
    for (int64_t p = 0; p < n; ++p) {
      inv_norm[p] = DecodeInverseNorm(keys, plane, p, x + p * d);
    }
    std::fill(r, r + n, 0.0);
    for (int32_t i : rows) {
      const float* ki = x + int64_t{i} * d;
      int64_t retain = -1;  // Position of i's most recent duplicate.
      for (int64_t p = 0; p < n; ++p) {
        const float* kp = x + p * d;
        double dot = 0.0;
        for (int32_t j = 0; j < d; ++j) dot += double{ki[j]} * kp[j];
        cos[p] = p == i ? 0.0 : dot * inv_norm[i] * inv_norm[p];
        if (cos[p] > 0.5 && (retain < 0 || index[p] > index[retain])) {
          retain = p;
        }
      }
      if (retain >= 0) cos[retain] = 0.0;
      for (int64_t p = 0; p < n; ++p) r[p] += cos[p];
    }
    double max = -HUGE_VAL;
    for (int64_t p = 0; p < n; ++p) {
      r[p] /= row_count;
      max = std::max(max, r[p]);
    }
    double sum = 0.0;
    for (int64_t p = 0; p < n; ++p) sum += std::exp(r[p] - max);
    for (int64_t p = 0; p < n; ++p) (*out)[p] += std::exp(r[p] - max) / sum;
  }
  for (double& v : *out) v /= static_cast<double>(keys.planes);
}

void QueryStats::Update(const float* queries, size_t count, double rate) {
  if (mean_.size() != count) {
    mean_.assign(queries, queries + count);
    var_.assign(count, 0.0);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    const double delta = double{queries[i]} - mean_[i];
    var_[i] = (1.0 - rate) * (var_[i] + rate * delta * delta);
    mean_[i] += rate * delta;
  }
}

void AddVarianceTerm(const KeyPlanes& keys, int32_t group, int32_t head_dim,
                     const std::vector<double>& var, float* z,
                     int64_t z_stride, std::vector<float>* scratch) {
  const int32_t d = keys.dim;
  const double inv = 1.0 / (2.0 * head_dim);
  scratch->resize(static_cast<size_t>(d));
  float* row = scratch->data();
  for (int32_t plane = 0; plane < keys.planes; ++plane) {
    for (int64_t p = 0; p < keys.live; ++p) {
      DecodeElements(keys.type, Row(keys, plane, p), static_cast<size_t>(d),
                     row);
      for (int32_t g = 0; g < group; ++g) {
        const int64_t r = int64_t{plane} * group + g;
        const double* v = var.data() + r * d;
        double term = 0.0;
        for (int32_t j = 0; j < d; ++j) {
          term += v[j] * (double{row[j]} * row[j]);
        }
        float* zp = z + r * z_stride + p;
        *zp = static_cast<float>(double{*zp} + term * inv);
      }
    }
  }
}

}  // namespace entrokv::internal
