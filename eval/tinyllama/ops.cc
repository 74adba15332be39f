#include "tinyllama/ops.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>

namespace entrokv::tinyllama {

void RmsNorm(absl::Span<const float> x, absl::Span<const float> weight,
             absl::Span<float> out, float epsilon) {
  assert(x.size() == weight.size() && x.size() == out.size());
  float ss = 0.0f;
  for (float v : x) ss += v * v;
  ss /= static_cast<float>(x.size());
  ss += epsilon;
  const float scale = 1.0f / std::sqrt(ss);
  for (size_t i = 0; i < x.size(); ++i) out[i] = weight[i] * (scale * x[i]);
}

void MatVec(absl::Span<const float> w, absl::Span<const float> x,
            absl::Span<float> out) {
  assert(w.size() == out.size() * x.size());
  // Eight independent partial sums let the compiler vectorise the dot product
  // without -ffast-math; the summation order is fixed, so results are
  // deterministic.
  constexpr size_t kLanes = 8;
  const size_t n = x.size();
  const size_t blocked = n - n % kLanes;
  for (size_t r = 0; r < out.size(); ++r) {
    const float* row = w.data() + r * n;
    float partial[kLanes] = {};
    for (size_t c = 0; c < blocked; c += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) partial[j] += row[c + j] * x[c + j];
    }
    float sum = 0.0f;
    for (size_t j = 0; j < kLanes; ++j) sum += partial[j];
    for (size_t c = blocked; c < n; ++c) sum += row[c] * x[c];
    out[r] = sum;
  }
}

void ApplyRope(absl::Span<float> v, int head_dim, absl::Span<const float> cos,
               absl::Span<const float> sin) {
  assert(head_dim % 2 == 0 && v.size() % head_dim == 0);
  assert(cos.size() == static_cast<size_t>(head_dim / 2));
  assert(sin.size() == cos.size());
  for (size_t base = 0; base < v.size(); base += head_dim) {
    for (int i = 0; i < head_dim; i += 2) {
      const float c = cos[i / 2];
      const float s = sin[i / 2];
      const float a = v[base + i];
      const float b = v[base + i + 1];
      v[base + i] = a * c - b * s;
      v[base + i + 1] = a * s + b * c;
    }
  }
}

void Softmax(absl::Span<float> x) {
  assert(!x.empty());
  const float max_value = *std::max_element(x.begin(), x.end());
  float sum = 0.0f;
  for (float& v : x) {
    v = std::exp(v - max_value);
    sum += v;
  }
  for (float& v : x) v /= sum;
}

void Swiglu(absl::Span<float> gate, absl::Span<const float> up) {
  assert(gate.size() == up.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    const float g = gate[i];
    gate[i] = g * (1.0f / (1.0f + std::exp(-g))) * up[i];
  }
}

namespace {

// Returns max and log Σ exp(x − max) in double.
void LogSumExp(absl::Span<const float> logits, double* max_value,
               double* log_sum) {
  double m = logits[0];
  for (float v : logits) m = std::max(m, static_cast<double>(v));
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - m);
  *max_value = m;
  *log_sum = std::log(sum);
}

}  // namespace

double NegativeLogLikelihood(absl::Span<const float> logits, int target) {
  assert(target >= 0 && static_cast<size_t>(target) < logits.size());
  double m = 0.0, log_sum = 0.0;
  LogSumExp(logits, &m, &log_sum);
  return m + log_sum - static_cast<double>(logits[target]);
}

double Entropy(absl::Span<const float> logits) {
  assert(!logits.empty());
  double m = 0.0, log_sum = 0.0;
  LogSumExp(logits, &m, &log_sum);
  // H = −Σ p log p with log p = x − m − log_sum.
  double h = 0.0;
  for (float v : logits) {
    const double log_p = static_cast<double>(v) - m - log_sum;
    h -= std::exp(log_p) * log_p;
  }
  return std::max(h, 0.0);
}

}  // namespace entrokv::tinyllama
