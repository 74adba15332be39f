// entrokv-bench-core: the cost of one session step on the CPU backend, as a
// fraction of the machine's memory bandwidth (DESIGN.md "Performance model").
//
// A step (append 1, score every live key, update, select) must read every live
// key once: live · layers · kv_heads · head_dim · sizeof(elem) bytes. The step
// benchmarks report that read as bytes per second; a STREAM-style copy of
// large arrays, measured in the same run, gives the bandwidth the read is
// compared with. The summary printed at the end is the ratio.
//
// Shape: 4 layers, 8 kv heads, 32 q heads, head_dim 128, f16 keys; single
// thread. The `entropy` policy runs with budget = live and a constant entropy,
// so B_t = B at every step and each step evicts exactly one entry: the live
// count stays constant. The attention rankings (tova, h2o) with a fixed
// budget show the cost of the softmax they need.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"

namespace entrokv {
namespace {

constexpr int kLayers = 4;
constexpr int kKvHeads = 8;
constexpr int kQHeads = 32;
constexpr int kHeadDim = 128;
constexpr int kKeyPool = 1024;    // Distinct keys, reused cyclically.
constexpr int kQueryPool = 16;    // Distinct queries.
constexpr int kPrefillChunk = 1024;

Shape BenchShape() {
  Shape shape;
  shape.layers = kLayers;
  shape.kv_heads = kKvHeads;
  shape.q_heads = kQHeads;
  shape.head_dim = kHeadDim;
  shape.element_type = ElementType::kF16;
  return shape;
}

// Random f16 keys and queries, encoded once.
struct Pools {
  std::vector<std::byte> keys;     // kKeyPool entries.
  std::vector<std::byte> queries;  // kQueryPool steps.
  size_t key_bytes = 0;
  size_t query_bytes = 0;

  Pools() {
    const Shape shape = BenchShape();
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    key_bytes = shape.key_elements() * ElementSize(shape.element_type);
    query_bytes = shape.query_elements() * ElementSize(shape.element_type);
    std::vector<float> values(kKeyPool * shape.key_elements());
    for (float& x : values) x = normal(rng);
    keys.resize(kKeyPool * key_bytes);
    EncodeElements(shape.element_type, values.data(), values.size(),
                   keys.data());
    values.resize(kQueryPool * shape.query_elements());
    for (float& x : values) x = 0.3f * normal(rng);
    queries.resize(kQueryPool * query_bytes);
    EncodeElements(shape.element_type, values.data(), values.size(),
                   queries.data());
  }
};

const Pools& GetPools() {
  static const Pools* pools = new Pools();
  return *pools;
}

// One session at `live` entries, and a step that keeps it there.
class SteadySession {
 public:
  SteadySession(const char* policy, int64_t live) {
    SessionConfig config;
    config.shape = BenchShape();
    config.budget = live;
    if (!ApplyPolicyName(policy, &config).ok()) std::abort();
    backend_ = std::move(CreateBackend(BackendKind::kCpu)).value();
    session_ = std::move(backend_->CreateSession(config, {})).value();
    // Prefill in chunks, without evictions (live never exceeds the budget).
    const Pools& pools = GetPools();
    std::vector<uint64_t> slots;
    std::vector<std::byte> keys;
    for (int64_t done = 0; done < live;) {
      const int64_t n = std::min<int64_t>(kPrefillChunk, live - done);
      slots.clear();
      keys.clear();
      for (int64_t i = 0; i < n; ++i) {
        slots.push_back(next_slot_);
        const std::byte* key =
            pools.keys.data() + (next_slot_ % kKeyPool) * pools.key_bytes;
        keys.insert(keys.end(), key, key + pools.key_bytes);
        ++next_slot_;
      }
      StepInput input;
      input.step = next_step_++;
      input.append.slot_ids = slots;
      input.append.keys = keys;
      input.queries = {pools.queries.data(), pools.query_bytes};
      input.entropy = 1.0;
      StepResult result;
      if (!session_->Step(input, &result).ok()) std::abort();
      done += n;
    }
  }

  // Appends one entry; the step evicts one.
  int64_t Step() {
    const Pools& pools = GetPools();
    slot_[0] = next_slot_;
    StepInput input;
    input.step = next_step_++;
    input.append.slot_ids = slot_;
    input.append.keys = {
        pools.keys.data() + (next_slot_ % kKeyPool) * pools.key_bytes,
        pools.key_bytes};
    input.queries = {
        pools.queries.data() + (next_step_ % kQueryPool) * pools.query_bytes,
        pools.query_bytes};
    input.entropy = 1.0;
    ++next_slot_;
    const absl::Status status = session_->Step(input, &result_);
    if (!status.ok()) std::abort();
    return result_.live;
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SessionState> session_;
  uint64_t next_slot_ = 0;
  uint64_t next_step_ = 0;
  uint64_t slot_[1] = {0};
  StepResult result_;
};

void RunSteps(benchmark::State& state, const char* policy) {
  const int64_t live = state.range(0);
  SteadySession session(policy, live);
  const double key_bytes_per_step =
      double(live + 1) * kLayers * kKvHeads * kHeadDim * 2;
  // Warm-up, untimed: the first step past the prefill grows the session's
  // key storage (a one-off allocation), and the caches settle.
  for (int i = 0; i < 3; ++i) session.Step();
  for (auto _ : state) {
    const int64_t after = session.Step();
    if (after != live) {
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
    ->Arg(1 << 10)->Arg(8 << 10)->Arg(32 << 10)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TovaStep)->Arg(8 << 10)->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_H2oStep)->Arg(8 << 10)->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_WindowStep)->Arg(8 << 10)->Unit(benchmark::kMillisecond)
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
BENCHMARK(BM_StreamCopy)->Arg(256)->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Keeps each run's bytes per second (from its real time), to print the
// summary after the console output.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& reports) override {
    ConsoleReporter::ReportRuns(reports);
    for (const Run& run : reports) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      const double seconds_per_iter =
          run.real_accumulated_time / double(run.iterations);
      double bytes_per_iter = 0;
      for (const char* key : {"key_bytes_per_step", "copy_bytes_per_iter"}) {
        auto it = run.counters.find(key);
        if (it != run.counters.end()) bytes_per_iter = it->second.value;
      }
      if (bytes_per_iter <= 0 || seconds_per_iter <= 0) continue;
      const std::string name = run.benchmark_name();
      auto found = std::find_if(entries_.begin(), entries_.end(),
                                [&](const Entry& e) { return e.name == name; });
      if (found == entries_.end()) {
        entries_.push_back(Entry{.name = name});
        found = entries_.end() - 1;
      }
      Entry& entry = *found;
      entry.bytes_per_second = bytes_per_iter / seconds_per_iter;
      entry.bytes_per_cpu_second =
          bytes_per_iter / (run.cpu_accumulated_time / double(run.iterations));
      entry.ms_per_iter = seconds_per_iter * 1e3;
      entry.is_copy = run.counters.count("copy_bytes_per_iter") > 0;
    }
  }

  void PrintSummary() const {
    double copy = 0, copy_cpu = 0;
    for (const Entry& entry : entries_) {
      if (!entry.is_copy) continue;
      copy = std::max(copy, entry.bytes_per_second);
      copy_cpu = std::max(copy_cpu, entry.bytes_per_cpu_second);
    }
    std::printf("\nentrokv-bench-core summary (f16 keys, %d layers x %d kv "
                "heads x d=%d, %d q heads, 1 thread)\n",
                kLayers, kKvHeads, kHeadDim, kQHeads);
    // Real time is the headline; on a shared machine the CPU-time figures
    // (the process's own time) show what contention hides.
    std::printf("STREAM copy bandwidth: %.2f GB/s (%.2f GB/s by CPU time)\n",
                copy / 1e9, copy_cpu / 1e9);
    std::printf("%-34s %10s %14s %12s %14s\n", "benchmark", "ms/step",
                "key GB/s", "of copy bw", "(by CPU time)");
    for (const Entry& entry : entries_) {
      if (entry.is_copy) continue;
      if (entry.name.find("Window") != std::string::npos) {
        std::printf("%-34s %10.3f %14s %16s\n", entry.name.c_str(),
                    entry.ms_per_iter, "no scoring", "-");
        continue;
      }
      std::printf("%-34s %10.3f %14.2f %11.1f%% %13.1f%%\n",
                  entry.name.c_str(), entry.ms_per_iter,
                  entry.bytes_per_second / 1e9,
                  copy > 0 ? 100.0 * entry.bytes_per_second / copy : 0.0,
                  copy_cpu > 0
                      ? 100.0 * entry.bytes_per_cpu_second / copy_cpu
                      : 0.0);
    }
  }

 private:
  struct Entry {
    std::string name;
    double bytes_per_second = 0;
    double bytes_per_cpu_second = 0;
    double ms_per_iter = 0;
    bool is_copy = false;
  };
  std::vector<Entry> entries_;  // In run order.
};

}  // namespace
}  // namespace entrokv

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  entrokv::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary();
  benchmark::Shutdown();
  return 0;
}
