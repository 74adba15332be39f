// The step rule's per-entry parts, written once for the CPU backend, the
// CUDA kernels (as __host__ __device__ functions) and the client library's
// fail-open rule: the rankings, each ranking's keep score, the affinity
// update, protection and the `random` ranking's SplitMix64 stream
// (docs/step-semantics.md sections 5, 7 and 8). No dependency beyond the C++
// standard library, so that nvcc compiles it into device code unchanged.
//
// Adding a ranking: a value of Ranking, its case in KeepScore (and its state
// update, if it has one, beside UpdateAffinity), its name in core/src/config.cc.

#ifndef ENTROKV_CORE_RULE_H_
#define ENTROKV_CORE_RULE_H_

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define ENTROKV_RULE_FN __host__ __device__ inline
#else
#define ENTROKV_RULE_FN inline
#endif

namespace entrokv {

// Which entries matter least (docs/design.md "Policies").
enum class Ranking : uint8_t {
  kWindow,     // Keeps the most recent entries.
  kStreaming,  // Keeps the first `streaming_sinks` entries + the most recent.
  kH2o,        // A recent share + the highest accumulated attention.
  kTova,       // The highest current-step attention.
  kKeyNorm,    // The lowest key L2 norms.
  kRandom,     // A seeded uniform choice among the unprotected.
  kAffinity,   // The highest affinity (this project).
  kKeyDiff,    // The keys least like the live keys' mean direction (KeyDiff).
  kExpected,   // The highest attention expected of future queries.
  kBirth,      // Attention weighted by the entropy an entry was born under.
  kRkv,        // Attention minus redundancy with the other live keys (R-KV).
};

namespace rule {

// SplitMix64 (Vigna): the mixing function of the `random` ranking and of
// the default projections (sketch.h).
ENTROKV_RULE_FN uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The `random` ranking's keep score of entry `index` at `step`: uniform in
// [0, 1), the top 53 bits of one SplitMix64 draw.
ENTROKV_RULE_FN double RandomKeepScore(uint64_t seed, int64_t index,
                                       uint64_t step) {
  const uint64_t x =
      seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(index) + 1) +
      0xD1B54A32D192ED03ull * step;
  return static_cast<double>(SplitMix64(x) >> 11) * 0x1.0p-53;
}

ENTROKV_RULE_FN double Sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// One affinity update of an entry's state (section 5): with the seed rule
// the state is Ω itself, Ω ← σ(Ω + βH·s); with logit_ema it is a, a ← λa +
// βH·s. `beta_h` is β·H_t, `mean_logit` the entry's s.
ENTROKV_RULE_FN double UpdateAffinity(bool seed_rule, double lambda,
                                      double beta_h, double mean_logit,
                                      double state) {
  return seed_rule ? Sigmoid(state + beta_h * mean_logit)
                   : lambda * state + beta_h * mean_logit;
}

// Ω of an affinity state.
ENTROKV_RULE_FN double Omega(bool seed_rule, double state) {
  return seed_rule ? state : Sigmoid(state);
}

// Section 7: protected by the first `sinks` entries ever appended, the last
// `recent`, or its pinned flag. `next_index`: entries ever appended.
ENTROKV_RULE_FN bool IsProtected(int64_t sinks, int64_t recent, int64_t index,
                                 int64_t next_index, bool pinned) {
  return pinned || index < sinks || index >= next_index - recent;
}

// What a keep score reads of one live entry (those a ranking does not use
// may be anything).
struct EntryView {
  int64_t index = 0;       // Append index.
  double key_norm = 0.0;   // Section 2.
  double attention = 0.0;  // a_i at this step (tova), section 3.
  double h2o_acc = 0.0;    // Accumulated attention, this step's included.
  double omega = 0.0;      // Ω after this step's update.
  double key_diff = 0.0;   // keydiff: −mean cos(k_i, anchor), section 3.
  double expected = 0.0;   // expected: e_i at this step, section 3.
  double birth_entropy = 0.0;  // birth: the entropy it was born under.
  double redundancy = 0.0;     // rkv: R_i, section 3.
};

// What it reads of the step.
struct StepView {
  Ranking ranking = Ranking::kWindow;
  int64_t streaming_sinks = 0;
  int64_t h2o_recent_from = 0;  // Append index from which h2o keeps all.
  uint64_t seed = 0;
  uint64_t step = 0;
  double birth_weight = 0.0;  // birth: η.
  double rkv_lambda = 0.0;    // rkv: λ.
};

// Section 7: the keep score (higher: keep); ties go to the older entry in
// the selection (section 8).
ENTROKV_RULE_FN double KeepScore(const StepView& s, const EntryView& e) {
  switch (s.ranking) {
    case Ranking::kWindow:
      return static_cast<double>(e.index);
    case Ranking::kStreaming:
      return e.index < s.streaming_sinks ? HUGE_VAL
                                         : static_cast<double>(e.index);
    case Ranking::kH2o:
      return e.index >= s.h2o_recent_from ? HUGE_VAL : e.h2o_acc;
    case Ranking::kTova:
      return e.attention;
    case Ranking::kKeyNorm:
      return -e.key_norm;
    case Ranking::kRandom:
      return RandomKeepScore(s.seed, e.index, s.step);
    case Ranking::kAffinity:
      return e.omega;
    case Ranking::kKeyDiff:
      return e.key_diff;
    case Ranking::kExpected:
      return e.expected;
    case Ranking::kBirth:
      return e.attention * exp(s.birth_weight * e.birth_entropy);
    case Ranking::kRkv:
      return s.rkv_lambda * e.attention - (1.0 - s.rkv_lambda) * e.redundancy;
  }
  return 0.0;
}

}  // namespace rule
}  // namespace entrokv

#undef ENTROKV_RULE_FN

#endif  // ENTROKV_CORE_RULE_H_
