// The steady session of entrokv-bench-core (bench_core.h): random key and
// query pools, the prefill, and one period of steps.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "bench_core.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"
#include "entrokv/core/shadow.h"

namespace entrokv::bench {
namespace {

constexpr int kQueryPool = 16;  // Distinct queries.
// Distinct keys, reused cyclically: at most kKeyPoolBytes of them, at most
// kKeyPoolEntries.
constexpr int64_t kKeyPoolEntries = 1024;
constexpr int64_t kKeyPoolBytes = int64_t{32} << 20;
// The largest prefill chunk, in key bytes (its decoded floats take twice
// that).
constexpr int64_t kPrefillBytes = int64_t{192} << 20;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool SameShape(const Shape& a, const Shape& b) {
  return a.layers == b.layers && a.kv_heads == b.kv_heads &&
         a.q_heads == b.q_heads && a.head_dim == b.head_dim &&
         a.element_type == b.element_type && a.sketch_dim == b.sketch_dim &&
         a.query_form == b.query_form;
}

}  // namespace

[[noreturn]] void Die(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "entrokv-bench-core: %s: %s\n", what,
               status.ToString().c_str());
  std::abort();
}

Shape BenchShape() {
  Shape shape;
  shape.layers = kLayers;
  shape.kv_heads = kKvHeads;
  shape.q_heads = kQHeads;
  shape.head_dim = kHeadDim;
  shape.element_type = ElementType::kF16;
  return shape;
}

// Random keys and queries of one shape, encoded once.
class Pools {
 public:
  explicit Pools(const Shape& shape)
      : shape_(shape),
        key_bytes_(shape.key_elements() * ElementSize(shape.element_type)),
        query_bytes_(shape.query_elements() * ElementSize(shape.element_type)),
        key_count_(std::clamp<int64_t>(kKeyPoolBytes / key_bytes_, 1,
                                       kKeyPoolEntries)) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> values(
        static_cast<size_t>(key_count_ * shape.key_elements()));
    for (float& x : values) x = normal(rng);
    keys_.resize(static_cast<size_t>(key_count_ * key_bytes_));
    EncodeElements(shape.element_type, values.data(), values.size(),
                   keys_.data());
    values.resize(static_cast<size_t>(kQueryPool * shape.query_elements()));
    for (float& x : values) x = 0.3f * normal(rng);
    queries_.resize(static_cast<size_t>(kQueryPool * query_bytes_));
    EncodeElements(shape.element_type, values.data(), values.size(),
                   queries_.data());
  }

  const Shape& shape() const { return shape_; }
  int64_t key_bytes() const { return key_bytes_; }

  // The key of entry `i` (cyclic).
  absl::Span<const std::byte> Key(uint64_t i) const {
    return {keys_.data() + (i % key_count_) * key_bytes_,
            static_cast<size_t>(key_bytes_)};
  }
  // The queries of step `i` (cyclic).
  absl::Span<const std::byte> Queries(uint64_t i) const {
    return {queries_.data() + (i % kQueryPool) * query_bytes_,
            static_cast<size_t>(query_bytes_)};
  }

 private:
  Shape shape_;
  int64_t key_bytes_;
  int64_t query_bytes_;
  int64_t key_count_;
  std::vector<std::byte> keys_;
  std::vector<std::byte> queries_;
};

namespace {

const Pools& GetPools(const Shape& shape) {
  static auto* pools = new std::vector<std::unique_ptr<Pools>>();
  for (const auto& p : *pools) {
    if (SameShape(p->shape(), shape)) return *p;
  }
  pools->push_back(std::make_unique<Pools>(shape));
  return *pools->back();
}

}  // namespace

SteadySession::SteadySession(const SessionConfig& config,
                             const ShadowOptions* shadows)
    : config_(config),
      pools_(GetPools(config.shape)),
      live_(config.budget),
      period_(std::lcm(config.decide_every,
                       config.block_summary ? config.block_size : 1)) {
  backend_ = std::move(CreateBackend(BackendKind::kCpu)).value();
  absl::StatusOr<std::unique_ptr<SessionState>> session =
      backend_->CreateSession(config, {});
  if (!session.ok()) Die("CreateSession", session.status());
  session_ = std::move(session).value();
  if (shadows != nullptr) {
    absl::StatusOr<std::unique_ptr<ShadowSet>> set =
        ShadowSet::Create(config, *shadows, backend_.get());
    if (!set.ok()) Die("ShadowSet::Create", set.status());
    shadows_ = std::move(set).value();
  }
  Prefill();
}

bool SteadySession::RunPeriod() {
  for (int s = 0; s < period_; ++s) {
    slot_[0] = next_slot_;
    Step(slot_, pools_.Key(next_slot_));
    ++next_slot_;
  }
  return result_.live == live_ && !result_.deferred;
}

void SteadySession::Step(absl::Span<const uint64_t> slots,
                         absl::Span<const std::byte> keys) {
  const bool decide = NextStepDecides();
  StepInput input;
  input.step = accepted_;
  input.append.slot_ids = slots;
  input.append.keys = keys;
  if (decide) {
    input.queries = pools_.Queries(accepted_);
    input.entropy = 1.0;
  }
  const absl::Status status = session_->Step(input, &result_);
  if (!status.ok()) Die("Step", status);
  if (shadows_ != nullptr) shadows_->Observe(input, result_);
  if (result_.deferred == decide) {
    Die("Step", absl::InternalError("unexpected decision cadence"));
  }
  ++accepted_;
}

void SteadySession::Prefill() {
  const int64_t unit = config_.block_summary ? config_.block_size : 1;
  // With a demote tier the session holds `live` on the device and
  // tier.capacity in the tier: the chunks past `live` are demoted by the
  // decisions that append them, and the tier is full before the first timed
  // step, so that every timed step demotes one entry and evicts one.
  const int64_t held = live_ + config_.tier.capacity;
  const int64_t target = CeilDiv(held + period_, unit);
  const int64_t max_units =
      std::max<int64_t>(1, kPrefillBytes / pools_.key_bytes() / unit);
  int64_t first = target;
  while (first > max_units || first * unit >= live_) {
    if (first == 1) break;
    first = CeilDiv(first, 2);
  }
  const int64_t chunk = first * unit;
  std::vector<uint64_t> slots;
  std::vector<std::byte> keys;
  for (int64_t done = 0; done < held;) {
    const int64_t n = std::min(chunk, held - done);
    slots.clear();
    keys.clear();
    for (int64_t i = 0; i < n; ++i) {
      slots.push_back(next_slot_);
      const absl::Span<const std::byte> key = pools_.Key(next_slot_);
      keys.insert(keys.end(), key.begin(), key.end());
      ++next_slot_;
    }
    while (!NextStepDecides()) Step({}, {});
    Step(slots, keys);
    done += n;
  }
  if (result_.live != live_ || Stats().tier_held != config_.tier.capacity) {
    Die("Prefill", absl::InternalError("evicted during the prefill"));
  }
}

SteadySession& CachedSession(const std::string& key,
                             const SessionConfig& config,
                             const ShadowOptions* shadows) {
  static auto* cached_key = new std::string();
  static auto* cached = new std::unique_ptr<SteadySession>();
  if (*cached == nullptr || *cached_key != key) {
    cached->reset();  // Free the previous one first.
    *cached = std::make_unique<SteadySession>(config, shadows);
    *cached_key = key;
  }
  return **cached;
}

}  // namespace entrokv::bench
