// The numerical pieces of a Llama forward pass, on float vectors.
//
// Each function follows llama2.c's run.c (same formulas, float arithmetic;
// MatVec sums in eight fixed lanes), so that the C++ model can be checked
// against an independent implementation to float precision. Pure functions,
// thread-safe.

#ifndef ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_OPS_H_
#define ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_OPS_H_

#include "absl/types/span.h"

namespace entrokv::tinyllama {

inline constexpr float kRmsNormEpsilon = 1e-5f;

// out[i] = weight[i] * x[i] / sqrt(mean(x²) + epsilon).
// REQUIRES: x, weight and out have the same size; out may alias x.
void RmsNorm(absl::Span<const float> x, absl::Span<const float> weight,
             absl::Span<float> out, float epsilon = kRmsNormEpsilon);

// out = w · x for a row-major w of out.size() rows and x.size() columns.
// REQUIRES: w.size() == out.size() * x.size(); out does not alias x.
void MatVec(absl::Span<const float> w, absl::Span<const float> x,
            absl::Span<float> out);

// Rotates consecutive pairs (v[2i], v[2i+1]) of every head of `v` by the angle
// whose cosine and sine are cos[i] and sin[i] (the same table for every head):
// (a, b) → (a·cos − b·sin, a·sin + b·cos).
// REQUIRES: v.size() is a multiple of head_dim, head_dim is even and cos and
// sin hold head_dim / 2 values.
void ApplyRope(absl::Span<float> v, int head_dim, absl::Span<const float> cos,
               absl::Span<const float> sin);

// In place: x ← exp(x − max x) / Σ exp(x − max x).
// REQUIRES: x is not empty.
void Softmax(absl::Span<float> x);

// In place: gate[i] ← silu(gate[i]) · up[i], with silu(v) = v / (1 + e^−v).
// REQUIRES: gate.size() == up.size().
void Swiglu(absl::Span<float> gate, absl::Span<const float> up);

// −log softmax(logits)[target], computed with a stable log-sum-exp in double.
// REQUIRES: 0 <= target < logits.size().
double NegativeLogLikelihood(absl::Span<const float> logits, int target);

// Entropy of softmax(logits) in nats, stable, in double.
// REQUIRES: logits is not empty and finite.
double Entropy(absl::Span<const float> logits);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_OPS_H_
