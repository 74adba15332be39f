// entrokv-bench-core: the cost of one session step on the CPU backend, as a
// fraction of the machine's memory bandwidth (docs/design.md "Performance model"),
// and the cost, wire bytes and server memory of the sketch, cadence and
// block-summary settings at the Llama-3-8B shape (issue #8 item 6).
//
// A step (append 1, score every live key, update, select) must read every live
// key once: live · layers · kv_heads · dim · sizeof(elem) bytes. The step
// benchmarks report that read as bytes per second; a STREAM-style copy of
// large arrays, measured in the same run, gives the bandwidth the read is
// compared with. The summaries printed at the end give the ratio.
//
// Every session runs the `entropy` policy with budget = live and a constant
// entropy, so B_t = B at every step: each decision evicts what was appended
// since the previous one, and the live count returns to `live` after every
// period (one step; K steps under decide_every = K; a block of N steps with
// block summaries). Single thread, one session.
//
// 1. BM_*Step: 4 layers, 8 kv heads, 32 q heads, head_dim 128, f16 keys. The
//    attention rankings (tova, h2o) with a fixed budget show the cost of the
//    softmax they need.
// 2. BM_Llama8B/<variant>/K<K>: the 8B shape (32 layers, 8 kv heads, 32 q
//    heads, head_dim 128, f16) at 4k and 32k live entries:
//      exact                    all 32 layers, per-head queries;
//      project:16+gsum          project:16 sketches of the 4 default scored
//                               layers (4, 12, 20, 28), group-sum queries;
//      exact+block16            as exact, with block_size 16 summaries;
//      project:16+gsum+block16  both;
//    each with decide_every 1 and 16 (15 of 16 steps send no queries and no
//    entropy). Times are per step, amortized over the period.
// 3. BM_Sketch*: the engine's side of project:16 (Sketcher), which the
//    engine pays, not the server.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"
#include "entrokv/core/sketch.h"

namespace entrokv {
namespace {

constexpr int kLayers = 4;
constexpr int kKvHeads = 8;
constexpr int kQHeads = 32;
constexpr int kHeadDim = 128;
constexpr int kQueryPool = 16;  // Distinct queries.
// Distinct keys, reused cyclically: at most kKeyPoolBytes of them, at most
// kKeyPoolEntries.
constexpr int64_t kKeyPoolEntries = 1024;
constexpr int64_t kKeyPoolBytes = int64_t{32} << 20;
// The largest prefill chunk, in key bytes (its decoded floats take twice
// that).
constexpr int64_t kPrefillBytes = int64_t{192} << 20;

// The Llama-3-8B shape and the settings its rows use.
constexpr int kModelLayers = 32;
constexpr int kSketchDim = 16;
constexpr int kBlockSize = 16;
constexpr int kCadence = 16;
// The engine's own keys per token: every layer, kv head and head_dim
// element, f16.
constexpr int64_t kEngineKeyBytesPerToken =
    int64_t{kModelLayers} * kKvHeads * kHeadDim * 2;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

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

bool SameShape(const Shape& a, const Shape& b) {
  return a.layers == b.layers && a.kv_heads == b.kv_heads &&
         a.q_heads == b.q_heads && a.head_dim == b.head_dim &&
         a.element_type == b.element_type && a.sketch_dim == b.sketch_dim &&
         a.query_form == b.query_form;
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

const Pools& GetPools(const Shape& shape) {
  static auto* pools = new std::vector<std::unique_ptr<Pools>>();
  for (const auto& p : *pools) {
    if (SameShape(p->shape(), shape)) return *p;
  }
  pools->push_back(std::make_unique<Pools>(shape));
  return *pools->back();
}

// One session held at `config.budget` live tokens, one entry appended a step.
class SteadySession {
 public:
  explicit SteadySession(const SessionConfig& config)
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
    Prefill();
  }

  int period() const { return period_; }
  SessionStats Stats() const { return session_->Stats(); }

  // Runs one period (period() steps); false when the live count did not
  // return to `live`.
  bool RunPeriod() {
    for (int s = 0; s < period_; ++s) {
      slot_[0] = next_slot_;
      Step(slot_, pools_.Key(next_slot_));
      ++next_slot_;
    }
    return result_.live == live_ && !result_.deferred;
  }

 private:
  bool NextStepDecides() const {
    return (accepted_ + 1) % config_.decide_every == 0;
  }

  // A decision step carries queries and the entropy; any other step only
  // its appends.
  void Step(absl::Span<const uint64_t> slots,
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
    if (result_.deferred == decide) {
      Die("Step", absl::InternalError("unexpected decision cadence"));
    }
    ++accepted_;
  }

  // Fills the session to `live` in large chunks, on decision steps, without
  // evictions (live never exceeds the budget). The CPU backend doubles its
  // key storage when it grows, so the first chunk is sized for the doubling
  // to end at or above what the steady steps need (`live` + one period's
  // appends): no timed step grows it, and it holds no unused 2x.
  void Prefill() {
    const int64_t unit = config_.block_summary ? config_.block_size : 1;
    const int64_t target = CeilDiv(live_ + period_, unit);
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
    for (int64_t done = 0; done < live_;) {
      const int64_t n = std::min(chunk, live_ - done);
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
    if (result_.live != live_) {
      Die("Prefill", absl::InternalError("evicted during the prefill"));
    }
  }

  const SessionConfig config_;
  const Pools& pools_;
  const int64_t live_;
  const int period_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SessionState> session_;
  uint64_t next_slot_ = 0;
  uint64_t accepted_ = 0;  // Steps accepted; also the next step number.
  uint64_t slot_[1] = {0};
  StepResult result_;
};

// Google Benchmark calls a benchmark function again for each trial; the
// session (gigabytes at the 8B shape) is built once per benchmark and kept,
// one at a time.
SteadySession& CachedSession(const std::string& key,
                             const SessionConfig& config) {
  static auto* cached_key = new std::string();
  static auto* cached = new std::unique_ptr<SteadySession>();
  if (*cached == nullptr || *cached_key != key) {
    cached->reset();  // Free the previous one first.
    *cached = std::make_unique<SteadySession>(config);
    *cached_key = key;
  }
  return **cached;
}

void RunSteps(benchmark::State& state, const char* policy) {
  const int64_t live = state.range(0);
  SessionConfig config;
  config.shape = BenchShape();
  config.budget = live;
  if (absl::Status st = ApplyPolicyName(policy, &config); !st.ok()) {
    Die("ApplyPolicyName", st);
  }
  SteadySession& session =
      CachedSession(std::string(policy) + "/" + std::to_string(live), config);
  const double key_bytes_per_step =
      double(live + 1) * kLayers * kKvHeads * kHeadDim * 2;
  // Warm-up, untimed: the caches settle.
  for (int i = 0; i < 3; ++i) session.RunPeriod();
  for (auto _ : state) {
    if (!session.RunPeriod()) {
      state.SkipWithError("live count drifted");
      break;
    }
  }
  state.SetBytesProcessed(int64_t(key_bytes_per_step) * state.iterations());
  state.counters["key_bytes_per_step"] = key_bytes_per_step;
}

void BM_EntropyStep(benchmark::State& state) { RunSteps(state, "entropy"); }
void BM_TovaStep(benchmark::State& state) { RunSteps(state, "tova"); }
void BM_H2oStep(benchmark::State& state) { RunSteps(state, "h2o"); }
// Window ranks by age and needs no score: it reads no key, and shows the
// step's cost outside the scoring path.
void BM_WindowStep(benchmark::State& state) { RunSteps(state, "window"); }

BENCHMARK(BM_EntropyStep)
    ->Arg(1 << 10)
    ->Arg(8 << 10)
    ->Arg(32 << 10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_TovaStep)
    ->Arg(8 << 10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_H2oStep)
    ->Arg(8 << 10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_WindowStep)
    ->Arg(8 << 10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// STREAM "Copy": b[i] = a[i] over arrays far larger than the caches; counted
// as STREAM counts it, 2 · 8 bytes an element (one read, one write).
void BM_StreamCopy(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0)) << 20;
  const size_t n = bytes / sizeof(double);
  std::unique_ptr<double[]> a(new double[n]);
  std::unique_ptr<double[]> b(new double[n]);
  for (size_t i = 0; i < n; ++i) {
    a[i] = double(i);
    b[i] = 0.0;
  }
  for (auto _ : state) {
    double* __restrict dst = b.get();
    const double* __restrict src = a.get();
    for (size_t i = 0; i < n; ++i) dst[i] = src[i];
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(2 * bytes) * state.iterations());
  state.counters["copy_bytes_per_iter"] = double(2 * bytes);
}
BENCHMARK(BM_StreamCopy)
    ->Arg(256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---------------------------------------------------------------------------
// The Llama-3-8B shape.

struct ModelVariant {
  const char* name;
  bool sketch;  // project:16 on the default scored layers, group-sum queries.
  bool blocks;  // block_size 16 with block summaries.
};
constexpr ModelVariant kModelVariants[] = {
    {"exact", false, false},
    {"project:16+gsum", true, false},
    {"exact+block16", false, true},
    {"project:16+gsum+block16", true, true},
};

SessionConfig ModelConfig(const ModelVariant& variant, int64_t live,
                          int32_t decide_every) {
  SessionConfig config;
  config.shape = BenchShape();
  config.shape.layers = kModelLayers;
  if (variant.sketch) {
    config.scored_layers = DefaultScoredLayers(kModelLayers);
    config.shape.layers = static_cast<int32_t>(config.scored_layers.size());
    config.shape.sketch_dim = kSketchDim;
    config.shape.query_form = QueryForm::kGroupSum;
  }
  if (variant.blocks) {
    config.block_size = kBlockSize;
    config.block_summary = true;
  }
  config.decide_every = decide_every;
  config.budget = live;
  if (absl::Status st = ApplyPolicyName("entropy", &config); !st.ok()) {
    Die("ApplyPolicyName", st);
  }
  return config;
}

// What the table needs beyond the timings, by benchmark name.
struct ModelRow {
  std::string name;  // The benchmark's function name.
  std::string variant;
  int32_t decide_every = 1;
  bool sketch = false;
};
std::vector<ModelRow>& ModelRows() {
  static auto* rows = new std::vector<ModelRow>();
  return *rows;
}

void RunModelSteps(benchmark::State& state, const ModelVariant& variant,
                   int32_t decide_every) {
  const int64_t live = state.range(0);
  const SessionConfig config = ModelConfig(variant, live, decide_every);
  SteadySession& session = CachedSession(std::string(variant.name) + "/K" +
                                             std::to_string(decide_every) +
                                             "/" + std::to_string(live),
                                         config);
  if (!session.RunPeriod()) {  // Warm-up, untimed.
    state.SkipWithError("live count drifted");
    return;
  }
  for (auto _ : state) {
    if (!session.RunPeriod()) {
      state.SkipWithError("live count drifted");
      break;
    }
  }
  const Shape& shape = config.shape;
  const double esize = double(ElementSize(shape.element_type));
  const double block = config.block_summary ? config.block_size : 1;
  // Keys a decision reads (one state per block with summaries), spread over
  // the decide_every steps of a decision period.
  const double key_bytes_per_step = double(live) *
                                    double(shape.key_elements()) * esize /
                                    block / decide_every;
  // Per appended token (one a step): its keys, and a decision's queries and
  // entropy (an 8-byte double) over decide_every tokens. Payload only: the
  // protobuf framing (tags, lengths, step number, slot id) is not counted.
  const double wire_bytes_per_token =
      double(shape.key_elements()) * esize +
      (double(shape.query_elements()) * esize + 8.0) / decide_every;
  // After a whole period: no partial block, nothing pending.
  const SessionStats stats = session.Stats();
  state.SetBytesProcessed(int64_t(key_bytes_per_step * session.period()) *
                          state.iterations());
  state.counters["key_bytes_per_step"] = key_bytes_per_step;
  state.counters["steps_per_iter"] = session.period();
  state.counters["wire_bytes_per_token"] = wire_bytes_per_token;
  state.counters["held_bytes_per_token"] =
      double(stats.bytes_held) / double(stats.live);
}

void RegisterModelBenchmarks() {
  for (const ModelVariant& variant : kModelVariants) {
    for (int32_t k : {1, kCadence}) {
      const std::string name =
          std::string("BM_Llama8B/") + variant.name + "/K" + std::to_string(k);
      ModelRows().push_back(ModelRow{.name = name,
                                     .variant = variant.name,
                                     .decide_every = k,
                                     .sketch = variant.sketch});
      benchmark::RegisterBenchmark(name.c_str(),
                                   [&variant, k](benchmark::State& state) {
                                     RunModelSteps(state, variant, k);
                                   })
          ->Arg(4 << 10)
          ->Arg(32 << 10)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

// The engine's side of project:16 at the 8B shape: n tokens' keys of the 4
// sent layers (4 x 8 kv heads x 128 floats each) to 4 x 8 x 16.
void BM_SketchKeys(benchmark::State& state) {
  const int64_t n = state.range(0);
  const SessionConfig config = ModelConfig(kModelVariants[1], 1024, kCadence);
  absl::StatusOr<Sketcher> sketcher = Sketcher::Create(config);
  if (!sketcher.ok()) Die("Sketcher::Create", sketcher.status());
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> in(static_cast<size_t>(n * sketcher->full_key_elements()));
  for (float& x : in) x = normal(rng);
  std::vector<float> out;
  for (auto _ : state) {
    sketcher->Keys(in, n, &out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(n * state.iterations());
  state.counters["tokens_per_iter"] = double(n);
}
BENCHMARK(BM_SketchKeys)->Arg(1)->Arg(64)->UseRealTime();

// And of a decision step's queries: 4 layers x 32 q heads x 128 floats to
// 4 x 8 group sums x 16.
void BM_SketchQueries(benchmark::State& state) {
  const SessionConfig config = ModelConfig(kModelVariants[1], 1024, kCadence);
  absl::StatusOr<Sketcher> sketcher = Sketcher::Create(config);
  if (!sketcher.ok()) Die("Sketcher::Create", sketcher.status());
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> in(static_cast<size_t>(sketcher->full_query_elements()));
  for (float& x : in) x = normal(rng);
  std::vector<float> out;
  for (auto _ : state) {
    sketcher->Queries(in, &out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["queries_per_iter"] = 1.0;
}
BENCHMARK(BM_SketchQueries)->UseRealTime();

// ---------------------------------------------------------------------------
// Summaries.

// Keeps each run's figures (from its real time, and its CPU time), to print
// the summaries after the console output.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& reports) override {
    ConsoleReporter::ReportRuns(reports);
    for (const Run& run : reports) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      if (run.iterations <= 0) continue;
      const double iterations = double(run.iterations);
      const double seconds_per_iter = run.real_accumulated_time / iterations;
      const double cpu_seconds_per_iter = run.cpu_accumulated_time / iterations;
      if (seconds_per_iter <= 0 || cpu_seconds_per_iter <= 0) continue;
      Entry entry{.name = run.benchmark_name(),
                  .function = run.run_name.function_name,
                  .args = run.run_name.args};
      entry.steps_per_iter = Counter(run, "steps_per_iter", 1.0);
      entry.s_per_step = seconds_per_iter / entry.steps_per_iter;
      entry.cpu_s_per_step = cpu_seconds_per_iter / entry.steps_per_iter;
      if (Counter(run, "copy_bytes_per_iter", 0) > 0) {
        entry.kind = Kind::kCopy;
        entry.bytes_per_step = Counter(run, "copy_bytes_per_iter", 0);
      } else if (Counter(run, "wire_bytes_per_token", 0) > 0) {
        entry.kind = Kind::kModel;
        entry.bytes_per_step = Counter(run, "key_bytes_per_step", 0);
        entry.wire_bytes_per_token = Counter(run, "wire_bytes_per_token", 0);
        entry.held_bytes_per_token = Counter(run, "held_bytes_per_token", 0);
      } else if (Counter(run, "tokens_per_iter", 0) > 0) {
        entry.kind = Kind::kSketchKeys;
        entry.s_per_step /= Counter(run, "tokens_per_iter", 1);
        entry.cpu_s_per_step /= Counter(run, "tokens_per_iter", 1);
      } else if (Counter(run, "queries_per_iter", 0) > 0) {
        entry.kind = Kind::kSketchQueries;
      } else if (Counter(run, "key_bytes_per_step", 0) > 0) {
        entry.kind = Kind::kStep;
        entry.bytes_per_step = Counter(run, "key_bytes_per_step", 0);
      } else {
        continue;
      }
      auto found =
          std::find_if(entries_.begin(), entries_.end(),
                       [&](const Entry& e) { return e.name == entry.name; });
      if (found == entries_.end()) {
        entries_.push_back(std::move(entry));
      } else {
        *found = std::move(entry);
      }
    }
  }

  void PrintSummary() const {
    double copy = 0, copy_cpu = 0;
    for (const Entry& entry : entries_) {
      if (entry.kind != Kind::kCopy) continue;
      copy = std::max(copy, entry.bytes_per_step / entry.s_per_step);
      copy_cpu =
          std::max(copy_cpu, entry.bytes_per_step / entry.cpu_s_per_step);
    }
    std::printf(
        "\nentrokv-bench-core summary (f16 keys, %d layers x %d kv "
        "heads x d=%d, %d q heads, 1 thread)\n",
        kLayers, kKvHeads, kHeadDim, kQHeads);
    // Real time is the headline; on a shared machine the CPU-time figures
    // (the process's own time) show what contention hides.
    std::printf("STREAM copy bandwidth: %.2f GB/s (%.2f GB/s by CPU time)\n",
                copy / 1e9, copy_cpu / 1e9);
    std::printf("%-34s %10s %14s %12s %14s\n", "benchmark", "ms/step",
                "key GB/s", "of copy bw", "(by CPU time)");
    for (const Entry& entry : entries_) {
      if (entry.kind != Kind::kStep) continue;
      if (entry.name.find("Window") != std::string::npos) {
        std::printf("%-34s %10.3f %14s %16s\n", entry.name.c_str(),
                    entry.s_per_step * 1e3, "no scoring", "-");
        continue;
      }
      std::printf("%-34s %10.3f", entry.name.c_str(), entry.s_per_step * 1e3);
      PrintBandwidth(entry, copy, copy_cpu);
      std::printf("\n");
    }
    PrintModelTable(copy, copy_cpu);
  }

 private:
  enum class Kind { kStep, kCopy, kModel, kSketchKeys, kSketchQueries };
  struct Entry {
    std::string name;      // Full benchmark name.
    std::string function;  // Name without arguments.
    std::string args;
    Kind kind = Kind::kStep;
    double steps_per_iter = 1;
    double s_per_step = 0;  // Real time (per token for kSketchKeys).
    double cpu_s_per_step = 0;
    double bytes_per_step = 0;  // Keys read (copied, for kCopy).
    double wire_bytes_per_token = 0;
    double held_bytes_per_token = 0;
  };

  static double Counter(const Run& run, const char* key, double otherwise) {
    auto it = run.counters.find(key);
    return it == run.counters.end() ? otherwise : it->second.value;
  }

  // Prints key GB/s and its share of the copy bandwidth by real and by CPU
  // time.
  static void PrintBandwidth(const Entry& entry, double copy, double copy_cpu) {
    const double rate = entry.bytes_per_step / entry.s_per_step;
    const double cpu_rate = entry.bytes_per_step / entry.cpu_s_per_step;
    std::printf(" %14.2f %11.1f%% %13.1f%%", rate / 1e9,
                copy > 0 ? 100.0 * rate / copy : 0.0,
                copy_cpu > 0 ? 100.0 * cpu_rate / copy_cpu : 0.0);
  }

  void PrintModelTable(double copy, double copy_cpu) const {
    bool any = false;
    for (const Entry& entry : entries_) any |= entry.kind == Kind::kModel;
    if (!any) return;
    std::printf(
        "\nLlama-3-8B shape: %d layers x %d kv heads x d=%d, %d q heads, f16; "
        "policy entropy, budget = live; 1 thread, 1 session.\n"
        "project:%d sends the %d default scored layers; block%d keeps one "
        "summary per %d tokens; K = decide_every.\n"
        "ms/step: time over K consecutive steps / K (real time; CPU time in "
        "brackets). key B/step: keys a decision reads / K.\n"
        "wire B/token: key bytes + (query bytes + 8 B entropy) / K, payload "
        "only (no protobuf framing). held B/token: Stats().bytes_held / "
        "live.\n"
        "engine key bytes per token (all %d layers, f16): %lld.\n",
        kModelLayers, kKvHeads, kHeadDim, kQHeads, kSketchDim,
        static_cast<int>(DefaultScoredLayers(kModelLayers).size()), kBlockSize,
        kBlockSize, kModelLayers,
        static_cast<long long>(kEngineKeyBytesPerToken));
    std::printf("%-24s %6s %3s %10s %10s %12s %9s %8s %8s %11s %11s %11s\n",
                "variant", "live", "K", "ms/step", "(CPU)", "key B/step",
                "key GB/s", "of copy", "(CPU)", "wire B/tok", "held B/tok",
                "engine/held");
    for (const Entry& entry : entries_) {
      if (entry.kind != Kind::kModel) continue;
      const ModelRow* row = FindRow(entry.function);
      if (row == nullptr) continue;
      const double rate = entry.bytes_per_step / entry.s_per_step;
      const double cpu_rate = entry.bytes_per_step / entry.cpu_s_per_step;
      std::printf(
          "%-24s %6s %3d %10.3f %10.3f %12.0f %9.2f %7.1f%% %7.1f%% %11.1f "
          "%11.1f %10.1fx\n",
          row->variant.c_str(), entry.args.c_str(), row->decide_every,
          entry.s_per_step * 1e3, entry.cpu_s_per_step * 1e3,
          entry.bytes_per_step, rate / 1e9, copy > 0 ? 100 * rate / copy : 0.0,
          copy_cpu > 0 ? 100 * cpu_rate / copy_cpu : 0.0,
          entry.wire_bytes_per_token, entry.held_bytes_per_token,
          double(kEngineKeyBytesPerToken) / entry.held_bytes_per_token);
    }
    for (const Entry& entry : entries_) {
      if (entry.kind == Kind::kSketchKeys) {
        std::printf(
            "engine side, Sketcher::Keys (project:%d, %d layers): %.0f ns per "
            "appended token, batch %s (%.0f ns CPU)\n",
            kSketchDim,
            static_cast<int>(DefaultScoredLayers(kModelLayers).size()),
            entry.s_per_step * 1e9, entry.args.c_str(),
            entry.cpu_s_per_step * 1e9);
      } else if (entry.kind == Kind::kSketchQueries) {
        std::printf(
            "engine side, Sketcher::Queries (group sums): %.0f ns per "
            "decision, %.0f ns per token at K=%d (%.0f ns CPU per decision)\n",
            entry.s_per_step * 1e9, entry.s_per_step * 1e9 / kCadence, kCadence,
            entry.cpu_s_per_step * 1e9);
      }
    }
    PrintGoals(copy);
  }

  // Issue #8 item 6, at 32k live.
  void PrintGoals(double copy) const {
    std::printf("\ngoals at %d live (issue #8 item 6):\n", 32 << 10);
    const std::string live = std::to_string(32 << 10);
    for (const Entry& entry : entries_) {
      if (entry.kind != Kind::kModel || entry.args != live) continue;
      const ModelRow* row = FindRow(entry.function);
      if (row == nullptr) continue;
      if (row->sketch && row->decide_every > 1) {
        const double ms = entry.s_per_step * 1e3;
        const double cpu_ms = entry.cpu_s_per_step * 1e3;
        std::printf(
            "  %s K=%d: %.3f ms/step (%.3f CPU) <= 0.5: %s; wire %.1f B/token "
            "<= 2048: %s; held %.1f B/token <= %lld (1/16 of the engine's): "
            "%s\n",
            row->variant.c_str(), row->decide_every, ms, cpu_ms,
            ms <= 0.5 ? "yes" : "NO", entry.wire_bytes_per_token,
            entry.wire_bytes_per_token <= 2048 ? "yes" : "NO",
            entry.held_bytes_per_token,
            static_cast<long long>(kEngineKeyBytesPerToken / 16),
            entry.held_bytes_per_token * 16 <= kEngineKeyBytesPerToken ? "yes"
                                                                       : "NO");
      } else if (row->variant == "exact" && row->decide_every == 1) {
        const double share =
            copy > 0 ? entry.bytes_per_step / entry.s_per_step / copy : 0.0;
        std::printf("  exact K=1: %.1f%% of copy bandwidth >= 60%%: %s\n",
                    100 * share, share >= 0.6 ? "yes" : "NO");
      }
    }
  }

  static const ModelRow* FindRow(const std::string& function) {
    for (const ModelRow& row : ModelRows()) {
      if (row.name == function) return &row;
    }
    return nullptr;
  }

  std::vector<Entry> entries_;  // In run order.
};

}  // namespace
}  // namespace entrokv

int main(int argc, char** argv) {
  entrokv::RegisterModelBenchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  entrokv::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary();
  benchmark::Shutdown();
  return 0;
}
