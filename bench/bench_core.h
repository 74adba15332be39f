// What the files of entrokv-bench-core share (bench_core.cc describes the
// benchmark): the shapes and settings of its cases, the steady session they
// time, and the Llama-3-8B rows the summary prints. Single-threaded, like the
// benchmark.

#ifndef ENTROKV_BENCH_BENCH_CORE_H_
#define ENTROKV_BENCH_BENCH_CORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "entrokv/core/shadow.h"

namespace entrokv::bench {

// The shape of the step benchmarks (BenchShape).
constexpr int kLayers = 4;
constexpr int kKvHeads = 8;
constexpr int kQHeads = 32;
constexpr int kHeadDim = 128;

// The Llama-3-8B shape and the settings its rows use.
constexpr int kModelLayers = 32;
constexpr int kSketchDim = 16;
constexpr int kBlockSize = 16;
constexpr int kCadence = 16;
// The engine's own keys per token: every layer, kv head and head_dim
// element, f16.
constexpr int64_t kEngineKeyBytesPerToken =
    int64_t{kModelLayers} * kKvHeads * kHeadDim * 2;

// The variants of the Llama-3-8B rows.
struct ModelVariant {
  const char* name;
  bool sketch;  // project:16 on the default scored layers, group-sum queries.
  bool blocks;  // block_size 16 with block summaries.
};
inline constexpr ModelVariant kModelVariants[] = {
    {"exact", false, false},
    {"project:16+gsum", true, false},
    {"exact+block16", false, true},
    {"project:16+gsum+block16", true, true},
};

// Prints `what` and `status` to stderr and aborts.
[[noreturn]] void Die(const char* what, const absl::Status& status);

// kLayers x kKvHeads x kHeadDim keys, kQHeads q heads, f16.
Shape BenchShape();

// The step benchmarks' shape with `policy` at `budget` (bench_cases.cc).
SessionConfig DefaultShapeConfig(const char* policy, int64_t budget);

// The 8B shape as `variant` sends it, policy entropy at budget `live`, a
// decision every `decide_every` steps (bench_cases.cc).
SessionConfig ModelConfig(const ModelVariant& variant, int64_t live,
                          int32_t decide_every);

class Pools;  // Random keys and queries of one shape (steady_session.cc).

// One session held at `config.budget` live tokens, one entry appended a step;
// with a demote tier (config.tier.capacity = D > 0), D more in the tier.
// With `shadows`, a ShadowSet of those options watches it from the first step
// (the prefill included), as the server runs one: every step is handed to
// its Observe after the session answered it.
class SteadySession {
 public:
  explicit SteadySession(const SessionConfig& config,
                         const ShadowOptions* shadows = nullptr);

  int period() const { return period_; }
  SessionStats Stats() const { return session_->Stats(); }
  const ShadowSet* shadows() const { return shadows_.get(); }

  // Runs one period (period() steps); false when the live count did not
  // return to `live`.
  bool RunPeriod();

 private:
  bool NextStepDecides() const {
    return (accepted_ + 1) % config_.decide_every == 0;
  }

  // A decision step carries queries and the entropy; any other step only
  // its appends.
  void Step(absl::Span<const uint64_t> slots, absl::Span<const std::byte> keys);

  // Fills the session to `live` in large chunks, on decision steps, without
  // evictions (live never exceeds the budget). The CPU backend doubles its
  // key storage when it grows, so the first chunk is sized for the doubling
  // to end at or above what the steady steps need (`live` + one period's
  // appends): no timed step grows it, and it holds no unused 2x.
  void Prefill();

  const SessionConfig config_;
  const Pools& pools_;
  const int64_t live_;
  const int period_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SessionState> session_;
  std::unique_ptr<ShadowSet> shadows_;
  uint64_t next_slot_ = 0;
  uint64_t accepted_ = 0;  // Steps accepted; also the next step number.
  uint64_t slot_[1] = {0};
  StepResult result_;
};

// Google Benchmark calls a benchmark function again for each trial; the
// session (gigabytes at the 8B shape) is built once per benchmark and kept,
// one at a time.
SteadySession& CachedSession(const std::string& key,
                             const SessionConfig& config,
                             const ShadowOptions* shadows = nullptr);

// What the table needs beyond the timings, by benchmark name.
struct ModelRow {
  std::string name;  // The benchmark's function name.
  std::string variant;
  int32_t decide_every = 1;
  bool sketch = false;
};
// The rows RegisterModelBenchmarks registered, in registration order.
std::vector<ModelRow>& ModelRows();

// Registers the BM_Llama8B benchmarks, and their rows in ModelRows(). Called
// once, before benchmark::Initialize.
void RegisterModelBenchmarks();

// Registers the BM_AgainstCopy benchmarks: the default shape's entropy step
// and the 8B exact and project:16+gsum steps (K = 1) at 32k live, each
// interleaved round by round with a STREAM copy (bench_cases.cc). Called
// once, after RegisterModelBenchmarks.
void RegisterAgainstCopyBenchmarks();

// Registers the BM_Shadows benchmarks (shadow_tier_cases.cc): a session at the
// default shape and at the 8B shape with project:16 and group-sum queries, 4k
// live, watched by no ShadowSet, by one without shadows (recall only), with 1,
// 2 and 4 shadows, and with 4 scoring one step in 16 (bench_cases.cc names the
// policies). Called once, after RegisterAgainstCopyBenchmarks.
void RegisterShadowBenchmarks();

// Registers the BM_Tier benchmarks (shadow_tier_cases.cc): a decision with a
// demote tier of D = B entries (docs/step-semantics.md section 12) against the
// same session without one, at the default shape (tova and entropy, 8k live)
// and at the 8B shape with project:16 and group-sum queries (entropy, 4k live).
// Called once, after RegisterShadowBenchmarks.
void RegisterTierBenchmarks();

}  // namespace entrokv::bench

#endif  // ENTROKV_BENCH_BENCH_CORE_H_
