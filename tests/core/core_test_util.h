// Helpers shared by the core tests: step inputs with owned buffers, a tiny
// session driver for hand-computed scenarios, and a naive double-precision
// reference of a step's scores.
//
// Nothing here computes an expected eviction: expected values live in the
// tests, computed by hand or by the naive reference below.

#ifndef ENTROKV_TESTS_CORE_CORE_TEST_UTIL_H_
#define ENTROKV_TESTS_CORE_CORE_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"
#include "entrokv/core/synthetic.h"
#include "gtest/gtest.h"

namespace entrokv::testing {

// Encodes `values` as little-endian bytes of `type`.
inline std::vector<std::byte> Encode(ElementType type,
                                     absl::Span<const float> values) {
  std::vector<std::byte> bytes(values.size() * ElementSize(type));
  if (!values.empty()) {
    EncodeElements(type, values.data(), values.size(), bytes.data());
  }
  return bytes;
}

// Builds one StepInput whose spans point into this builder's own buffers; the
// builder must outlive the input. The buffers are public-by-accessor so that
// bad-input tests can corrupt exactly one field.
class StepBuilder {
 public:
  explicit StepBuilder(const Shape& shape) : shape_(shape) {}

  // Appends an entry whose keys are `key` ([layer][kv_head][head_dim]).
  StepBuilder& Append(uint64_t slot, absl::Span<const float> key,
                      bool pinned = false) {
    slot_ids_.push_back(slot);
    pinned_.push_back(pinned ? 1 : 0);
    any_pinned_ = any_pinned_ || pinned;
    std::vector<std::byte> bytes = Encode(shape_.element_type, key);
    key_bytes_.insert(key_bytes_.end(), bytes.begin(), bytes.end());
    return *this;
  }
  StepBuilder& Append(uint64_t slot, std::initializer_list<float> key,
                      bool pinned = false) {
    return Append(slot, absl::Span<const float>(key.begin(), key.size()),
                  pinned);
  }
  StepBuilder& Query(absl::Span<const float> query) {
    query_bytes_ = Encode(shape_.element_type, query);
    return *this;
  }
  StepBuilder& Query(std::initializer_list<float> query) {
    return Query(absl::Span<const float>(query.begin(), query.size()));
  }
  StepBuilder& Entropy(double entropy) {
    entropy_ = entropy;
    return *this;
  }
  StepBuilder& Logits(std::vector<float> logits) {
    logits_ = std::move(logits);
    return *this;
  }

  std::vector<uint64_t>& slot_ids() { return slot_ids_; }
  std::vector<uint8_t>& pinned_flags() { return pinned_; }
  std::vector<std::byte>& key_bytes() { return key_bytes_; }
  std::vector<std::byte>& query_bytes() { return query_bytes_; }
  std::optional<double>& entropy() { return entropy_; }
  // Sends the pinned flags even when none is set.
  void SendPinnedFlags() { any_pinned_ = true; }

  StepInput Build(uint64_t step) const {
    StepInput input;
    input.step = step;
    input.append.slot_ids = slot_ids_;
    if (any_pinned_) input.append.pinned = pinned_;
    input.append.keys = key_bytes_;
    input.queries = query_bytes_;
    input.entropy = entropy_;
    input.logits = logits_;
    return input;
  }

 private:
  Shape shape_;
  std::vector<uint64_t> slot_ids_;
  std::vector<uint8_t> pinned_;
  bool any_pinned_ = false;
  std::vector<std::byte> key_bytes_;
  std::vector<std::byte> query_bytes_;
  std::optional<double> entropy_;
  std::vector<float> logits_;
};

// A synthetic story, one step at a time: at step t, `appends(t)` entries,
// each the stream's next key (slots 1, 2, ...; every pin_every-th pinned),
// with the query and entropy drawn last, numbered first_step + t. The input
// Next() returns points into the story and lives until the next call.
class SyntheticStory {
 public:
  SyntheticStory(const Shape& shape, uint64_t seed, int (*appends)(int t),
                 uint64_t pin_every, uint64_t first_step)
      : shape_(shape),
        stream_(Params(shape, seed)),
        appends_(appends),
        pin_every_(pin_every),
        first_step_(first_step) {}

  // Draws a step before the first, so that a step without appends still has
  // a query.
  void DrawAhead() { stream_.Next(&drawn_); }

  StepInput Next() {
    builder_.emplace(shape_);
    for (int i = 0; i < appends_(t_); ++i, ++slot_) {
      stream_.Next(&drawn_);
      builder_->Append(slot_, drawn_.key, /*pinned=*/slot_ % pin_every_ == 0);
    }
    builder_->Query(drawn_.query).Entropy(drawn_.entropy);
    return builder_->Build(first_step_ + uint64_t(t_++));
  }

 private:
  static SyntheticParams Params(const Shape& shape, uint64_t seed) {
    SyntheticParams params;
    params.shape = shape;
    params.seed = seed;
    return params;
  }

  Shape shape_;
  SyntheticStream stream_;
  int (*appends_)(int t);
  uint64_t pin_every_;
  uint64_t first_step_;
  SyntheticStep drawn_;
  std::optional<StepBuilder> builder_;
  uint64_t slot_ = 1;
  int t_ = 0;
};

// The shape of every hand-computed scenario: one layer, one kv head, one q
// head, d = 2, f32.
inline Shape TinyShape(ElementType type = ElementType::kF32) {
  Shape shape;
  shape.layers = 1;
  shape.kv_heads = 1;
  shape.q_heads = 1;
  shape.head_dim = 2;
  shape.element_type = type;
  return shape;
}

inline SessionConfig TinyConfig(Ranking ranking, BudgetControl control,
                                int64_t budget) {
  SessionConfig config;
  config.shape = TinyShape();
  config.budget = budget;
  config.ranking = ranking;
  config.budget_control = control;
  return config;
}

// Drives one CPU session through hand-written steps. Slot ids are chosen by
// the test; step numbers count 1, 2, 3, ...
//
// Queries are given as the logits they should produce: Step(x, y) sends the
// query √2·(x, y), so that with d = 2 the scaled score of key k is x·k0 + y·k1.
class TinySession {
 public:
  explicit TinySession(const SessionConfig& config,
                       const SessionLimits& limits = {})
      : config_(config), pending_(config.shape) {
    auto backend = CreateBackend(BackendKind::kCpu);
    EXPECT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(backend).value();
    auto session = backend_->CreateSession(config, limits);
    EXPECT_TRUE(session.ok()) << session.status();
    if (session.ok()) session_ = std::move(session).value();
  }

  TinySession& Append(uint64_t slot, float k0, float k1, bool pinned = false) {
    pending_.Append(slot, {k0, k1}, pinned);
    return *this;
  }
  TinySession& AppendPinned(uint64_t slot, float k0, float k1) {
    return Append(slot, k0, k1, /*pinned=*/true);
  }
  // Appends `count` entries with key (0, 0) and slots first, first + 1, ...
  TinySession& AppendZeros(uint64_t first, int count) {
    for (int i = 0; i < count; ++i) Append(first + i, 0.0f, 0.0f);
    return *this;
  }

  // Appends an entry with a whole key (any shape).
  TinySession& AppendKey(uint64_t slot, std::vector<float> key,
                         bool pinned = false) {
    pending_.Append(slot, key, pinned);
    return *this;
  }

  // Runs the step with the appends queued so far. Expects success.
  StepResult Step(float x, float y, std::optional<double> entropy = {}) {
    const float r = std::sqrt(2.0f);
    return StepWithQuery({r * x, r * y}, entropy);
  }
  // Runs the step with a whole query (any shape). Expects success.
  StepResult StepWithQuery(std::vector<float> query,
                           std::optional<double> entropy = {}) {
    pending_.Query(query);
    if (entropy.has_value()) pending_.Entropy(*entropy);
    StepResult result;
    if (session_ == nullptr) {
      ADD_FAILURE() << "no session";
      return result;
    }
    trace_ = StepTrace{};
    const absl::Status status =
        session_->Step(pending_.Build(next_step_), &result, &trace_);
    EXPECT_TRUE(status.ok()) << status;
    ++next_step_;
    pending_ = StepBuilder(config_.shape);
    return result;
  }
  // A step whose query is (0, 0): every score is 0.
  StepResult StepFlat(std::optional<double> entropy = {}) {
    return Step(0.0f, 0.0f, entropy);
  }

  SessionState& session() { return *session_; }
  const StepTrace& trace() const { return trace_; }
  // The trace entry of `slot` in the last step (live before its evictions).
  size_t TraceIndex(uint64_t slot) const {
    for (size_t i = 0; i < trace_.slots.size(); ++i) {
      if (trace_.slots[i] == slot) return i;
    }
    ADD_FAILURE() << "slot " << slot << " not in the trace";
    return 0;
  }
  double RankScore(uint64_t slot) const {
    return trace_.rank_score.at(TraceIndex(slot));
  }
  std::vector<uint64_t> Live() const { return session_->LiveSlots(); }

 private:
  SessionConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SessionState> session_;
  StepBuilder pending_;
  StepTrace trace_;
  uint64_t next_step_ = 1;
};

inline double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The naive reference of docs/design.md "One step" scores, in double: for live
// entries with decoded keys `keys` (n × key_elements) and decoded `query`,
// s_i and a_i.
struct ReferenceScores {
  std::vector<double> mean_logit;
  std::vector<double> attention;
};
inline ReferenceScores ComputeReferenceScores(
    const Shape& shape, const std::vector<std::vector<float>>& keys,
    const std::vector<float>& query) {
  const size_t n = keys.size();
  ReferenceScores out;
  out.mean_logit.assign(n, 0.0);
  out.attention.assign(n, 0.0);
  const int group = shape.q_heads / shape.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
  const double heads = static_cast<double>(shape.layers) * shape.q_heads;
  std::vector<double> z(n);
  for (int l = 0; l < shape.layers; ++l) {
    for (int h = 0; h < shape.q_heads; ++h) {
      const int kv = h / group;
      const float* q = &query[(size_t(l) * shape.q_heads + h) * shape.head_dim];
      double max_z = -INFINITY;
      for (size_t i = 0; i < n; ++i) {
        const float* k =
            &keys[i][(size_t(l) * shape.kv_heads + kv) * shape.head_dim];
        double dot = 0.0;
        for (int d = 0; d < shape.head_dim; ++d) dot += double(q[d]) * k[d];
        z[i] = dot * scale;
        max_z = std::max(max_z, z[i]);
      }
      double sum = 0.0;
      for (size_t i = 0; i < n; ++i) sum += std::exp(z[i] - max_z);
      for (size_t i = 0; i < n; ++i) {
        out.mean_logit[i] += z[i] / heads;
        out.attention[i] += std::exp(z[i] - max_z) / sum / heads;
      }
    }
  }
  return out;
}

// |a − b| ≤ rel·max(|a|, |b|) + abs.
inline ::testing::AssertionResult Near(double a, double b, double rel,
                                       double abs) {
  const double tol = rel * std::max(std::fabs(a), std::fabs(b)) + abs;
  if (std::fabs(a - b) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << a << " vs " << b << " differ by " << std::fabs(a - b)
         << " > " << tol;
}

}  // namespace entrokv::testing

#endif  // ENTROKV_TESTS_CORE_CORE_TEST_UTIL_H_
