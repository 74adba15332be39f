#include "needles.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <memory>
#include <numbers>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/rule.h"
#include "entrokv/core/session.h"

namespace entrokv::sim {
namespace {

// A seeded draw in [0, 1) and a Gaussian (Box-Muller), from SplitMix64.
class Draws {
 public:
  explicit Draws(uint64_t seed) : state_(seed) {}
  double Uniform() {
    state_ += 0x9E3779B97F4A7C15ull;
    return static_cast<double>(rule::SplitMix64(state_) >> 11) * 0x1.0p-53;
  }
  double Gaussian() {
    const double u = std::max(Uniform(), 1e-300);
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * Uniform());
  }

 private:
  uint64_t state_;
};

struct Needle {
  int64_t index = 0;         // Its append index (= its step).
  int64_t query_step = 0;    // When its query comes.
  std::vector<float> dir;    // [layer][kv][d], unit per (layer, kv).
};

}  // namespace

absl::StatusOr<NeedleResult> RunNeedles(const SessionConfig& policy,
                                        const NeedleOptions& o) {
  const Shape& s = policy.shape;
  if (s.element_type != ElementType::kF32 || s.sketch_dim != 0 ||
      s.query_form != QueryForm::kPerHead) {
    return absl::InvalidArgumentError(
        "needles: the policy's shape must be f32, exact, per-head queries");
  }
  if (o.entries < 1 || o.needles < 1 || o.min_gap < 1 ||
      o.max_gap < o.min_gap) {
    return absl::InvalidArgumentError(
        "needles: entries, needles and min_gap must be >= 1, max_gap >= "
        "min_gap");
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateBackend(BackendKind::kCpu);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<std::unique_ptr<SessionState>> session =
      (*backend)->CreateSession(policy, SessionLimits{});
  if (!session.ok()) return session.status();

  const int32_t d = s.head_dim;
  const int64_t planes = int64_t{s.layers} * s.kv_heads;
  Draws draws(o.seed);
  std::vector<Needle> needles(static_cast<size_t>(o.needles));
  std::map<int64_t, size_t> planted_at, asked_at;  // Step -> needle.
  for (int32_t n = 0; n < o.needles; ++n) {
    Needle& needle = needles[n];
    needle.index = (int64_t{n} + 1) * (o.entries / 2) / (o.needles + 1);
    const double log_gap =
        std::log(static_cast<double>(o.min_gap)) +
        draws.Uniform() * (std::log(static_cast<double>(o.max_gap)) -
                            std::log(static_cast<double>(o.min_gap)));
    needle.query_step =
        needle.index + static_cast<int64_t>(std::llround(std::exp(log_gap)));
    needle.dir.resize(static_cast<size_t>(planes * d));
    for (int64_t p = 0; p < planes; ++p) {
      double norm = 0.0;
      float* v = needle.dir.data() + p * d;
      for (int32_t j = 0; j < d; ++j) {
        v[j] = static_cast<float>(draws.Gaussian());
        norm += double{v[j]} * v[j];
      }
      const double inv = 1.0 / std::sqrt(norm);
      for (int32_t j = 0; j < d; ++j) v[j] = static_cast<float>(v[j] * inv);
    }
    planted_at[needle.index] = n;
    if (needle.query_step < o.entries) asked_at[needle.query_step] = n;
  }

  SyntheticParams params = o.stream;
  params.shape = s;
  SyntheticStream stream(params);
  SyntheticStep step;
  NeedleResult result;
  result.policy = PolicyName(policy);
  std::vector<uint8_t> live_flags;  // By append index.
  std::vector<uint64_t> slot(1);
  std::vector<float> query;
  double live_sum = 0.0;
  int64_t live = 0;
  for (int64_t t = 0; t < o.entries; ++t) {
    stream.Next(&step);
    if (auto it = planted_at.find(t); it != planted_at.end()) {
      // The needle's key: its direction, at this key's own norm per plane.
      const Needle& needle = needles[it->second];
      for (int64_t p = 0; p < planes; ++p) {
        float* k = step.key.data() + p * d;
        double norm = 0.0;
        for (int32_t j = 0; j < d; ++j) norm += double{k[j]} * k[j];
        const double scale = std::sqrt(norm);
        for (int32_t j = 0; j < d; ++j) {
          k[j] = static_cast<float>(needle.dir[p * d + j] * scale);
        }
      }
    }
    query = step.query;
    if (auto it = asked_at.find(t); it != asked_at.end()) {
      const Needle& needle = needles[it->second];
      ++result.planted;
      if (live_flags[static_cast<size_t>(needle.index)] != 0) {
        ++result.retained;
      }
      const double scale = o.query_scale * std::sqrt(static_cast<double>(d));
      for (int32_t l = 0; l < s.layers; ++l) {
        for (int32_t h = 0; h < s.q_heads; ++h) {
          const int64_t p = int64_t{l} * s.kv_heads + h / s.group_size();
          for (int32_t j = 0; j < d; ++j) {
            query[(int64_t{l} * s.q_heads + h) * d + j] =
                static_cast<float>(needle.dir[p * d + j] * scale);
          }
        }
      }
    }
    slot[0] = static_cast<uint64_t>(t);
    StepInput in;
    in.step = static_cast<uint64_t>(t) + 1;
    in.append.slot_ids = slot;
    in.append.keys = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(step.key.data()),
        step.key.size() * sizeof(float));
    in.queries = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(query.data()),
        query.size() * sizeof(float));
    in.entropy = step.entropy;
    StepResult r;
    if (absl::Status st = (*session)->Step(in, &r); !st.ok()) return st;
    live_flags.push_back(1);
    for (uint64_t id : r.evicted) live_flags[static_cast<size_t>(id)] = 0;
    live = r.live;
    live_sum += static_cast<double>(live);
    result.peak_live = std::max(result.peak_live, live);
  }
  result.mean_live = live_sum / static_cast<double>(o.entries);
  return result;
}

}  // namespace entrokv::sim
