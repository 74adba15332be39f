#include "entrokv/core/sketch.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "sketch_project.h"
#include "step_common.h"

namespace entrokv {

std::vector<double> DefaultProjection(uint64_t seed, int32_t model_layer,
                                      int32_t kv_head, int32_t head_dim,
                                      int32_t r) {
  const int64_t d = head_dim;
  std::vector<double> p(static_cast<size_t>(d * r));
  const uint64_t base = rule::SplitMix64(
      seed ^
      ((static_cast<uint64_t>(static_cast<uint32_t>(model_layer)) << 32) |
       static_cast<uint32_t>(kv_head)));
  uint64_t t = 0;
  for (int32_t c = 0; c < r; ++c) {
    for (int64_t j = 0; j < d; ++j) {
      double g = 0.0;
      for (int m = 0; m < 12; ++m) {
        g +=
            static_cast<double>(rule::SplitMix64(base + t++) >> 11) * 0x1.0p-53;
      }
      p[j * r + c] = g - 6.0;
    }
  }
  // Modified Gram-Schmidt over the columns, in order.
  for (int32_t c = 0; c < r; ++c) {
    for (int32_t prev = 0; prev < c; ++prev) {
      double dot = 0.0;
      for (int64_t j = 0; j < d; ++j) dot += p[j * r + c] * p[j * r + prev];
      for (int64_t j = 0; j < d; ++j) p[j * r + c] -= dot * p[j * r + prev];
    }
    double sq = 0.0;
    for (int64_t j = 0; j < d; ++j) sq += p[j * r + c] * p[j * r + c];
    const double norm = std::sqrt(sq);
    for (int64_t j = 0; j < d; ++j) p[j * r + c] /= norm;
  }
  return p;
}

absl::StatusOr<Sketcher> Sketcher::Create(const SessionConfig& config,
                                          absl::Span<const float> matrices) {
  if (absl::Status st = ValidateSessionConfig(config); !st.ok()) return st;
  Sketcher s;
  s.shape_ = config.shape;
  const Shape& shape = config.shape;
  s.identity_ =
      shape.sketch_dim == 0 && shape.query_form == QueryForm::kPerHead;
  if (shape.sketch_dim == 0) {
    if (!matrices.empty()) {
      return absl::InvalidArgumentError(
          "projection: matrices given for an exact (unsketched) session");
    }
    return s;
  }
  const int64_t d = shape.head_dim;
  const int64_t r = shape.sketch_dim;
  const int64_t planes = int64_t{shape.layers} * shape.kv_heads;
  if (!matrices.empty()) {
    if (static_cast<int64_t>(matrices.size()) != planes * d * r) {
      return absl::InvalidArgumentError(
          absl::StrCat("projection: ", matrices.size(), " elements, expected ",
                       planes, " (layers x kv heads) x ", d, " x ", r));
    }
    s.matrices_.reserve(matrices.size());
    for (size_t i = 0; i < matrices.size(); ++i) {
      if (!std::isfinite(matrices[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("projection: non-finite element ", i));
      }
      s.matrices_.push_back(matrices[i]);
    }
    return s;
  }
  s.matrices_.reserve(static_cast<size_t>(planes * d * r));
  for (int32_t l = 0; l < shape.layers; ++l) {
    const int32_t model_layer =
        config.scored_layers.empty() ? l : config.scored_layers[l];
    for (int32_t g = 0; g < shape.kv_heads; ++g) {
      const std::vector<double> p =
          DefaultProjection(config.projection_seed, model_layer, g,
                            shape.head_dim, shape.sketch_dim);
      s.matrices_.insert(s.matrices_.end(), p.begin(), p.end());
    }
  }
  return s;
}

int64_t Sketcher::full_key_elements() const {
  return int64_t{shape_.layers} * shape_.kv_heads * shape_.head_dim;
}

int64_t Sketcher::full_query_elements() const {
  return int64_t{shape_.layers} * shape_.q_heads * shape_.head_dim;
}

void Sketcher::Keys(absl::Span<const float> in, int64_t n,
                    std::vector<float>* out) const {
  if (shape_.sketch_dim == 0) {
    out->assign(in.begin(), in.end());
    return;
  }
  const int64_t d = shape_.head_dim;
  const int64_t r = shape_.sketch_dim;
  const int64_t planes = int64_t{shape_.layers} * shape_.kv_heads;
  out->resize(static_cast<size_t>(n * planes * r));
  // The per-token cost of an engine: vectorised across the r columns where
  // the CPU can, the n tokens together, bit-identical to the scalar
  // arithmetic (sketch_project.h).
  internal::BestProject()(matrices_.data(), in.data(), n, planes, d, r,
                          out->data());
}

void Sketcher::Queries(absl::Span<const float> in,
                       std::vector<float>* out) const {
  if (identity_) {
    out->assign(in.begin(), in.end());
    return;
  }
  const int64_t d = shape_.head_dim;
  const int64_t r = shape_.vector_dim();
  const int64_t group = shape_.group_size();
  const int64_t planes = int64_t{shape_.layers} * shape_.kv_heads;
  // A plane's q heads are contiguous: (l · q_heads + kv · group + h) · d.
  if (shape_.query_form == QueryForm::kPerHead) {  // Sketched (not identity_).
    // Each q head's query is a token of its plane's matrix: the float form,
    // the plane's heads sharing each row of P (sketch_project.h).
    out->resize(static_cast<size_t>(planes * group * r));
    const internal::ProjectFn project = internal::BestProject();
    for (int64_t plane = 0; plane < planes; ++plane) {
      project(matrices_.data() + plane * d * r, in.data() + plane * group * d,
              group, 1, d, r, out->data() + plane * group * r);
    }
    return;
  }
  // Group sums, in double; a thread's scratch, so that a step allocates
  // nothing once warm.
  thread_local std::vector<double> v;
  v.resize(static_cast<size_t>(planes * d));
  internal::BestSumGroups()(in.data(), planes, group, d, v.data());
  out->resize(static_cast<size_t>(planes * r));
  if (shape_.sketch_dim == 0) {  // Exact.
    for (size_t i = 0; i < v.size(); ++i) {
      (*out)[i] = static_cast<float>(v[i]);
    }
    return;
  }
  internal::BestProjectSums()(matrices_.data(), v.data(), 1, planes, d, r,
                              out->data());
}

}  // namespace entrokv
