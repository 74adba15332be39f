// The cases of entrokv-bench-core (bench_core.cc): the step benchmarks, the
// STREAM copy they are compared with, the Llama-3-8B rows and the engine's
// sketch. The BENCHMARK registrations stay in this one file, so that they run
// in the order written here.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench_core.h"
#include "cpu_kernels.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"
#include "entrokv/core/sketch.h"
#include "sketch_project.h"

namespace entrokv::bench {
namespace {

// SessionStats.bytes_copied per step over the timed periods: the key and
// query bytes the steps wrote, in any form (issue #19 item 4).
class CopiedBytes {
 public:
  explicit CopiedBytes(const SteadySession& session)
      : session_(session), before_(session.Stats().bytes_copied) {}
  double PerStep(int64_t periods) const {
    const int64_t steps = periods * session_.period();
    return steps > 0 ? double(session_.Stats().bytes_copied - before_) /
                           double(steps)
                     : 0.0;
  }

 private:
  const SteadySession& session_;
  const int64_t before_;
};

}  // namespace

SessionConfig DefaultShapeConfig(const char* policy, int64_t budget) {
  SessionConfig config;
  config.shape = BenchShape();
  config.budget = budget;
  if (absl::Status st = ApplyPolicyName(policy, &config); !st.ok()) {
    Die("ApplyPolicyName", st);
  }
  return config;
}

namespace {

void RunSteps(benchmark::State& state, const char* policy) {
  const int64_t live = state.range(0);
  const SessionConfig config = DefaultShapeConfig(policy, live);
  SteadySession& session =
      CachedSession(std::string(policy) + "/" + std::to_string(live), config);
  const double key_bytes_per_step =
      double(live + 1) * kLayers * kKvHeads * kHeadDim * 2;
  // Warm-up, untimed: the caches settle.
  for (int i = 0; i < 3; ++i) session.RunPeriod();
  const CopiedBytes copied(session);
  for (auto _ : state) {
    if (!session.RunPeriod()) {
      state.SkipWithError("live count drifted");
      break;
    }
  }
  state.SetBytesProcessed(int64_t(key_bytes_per_step) * state.iterations());
  state.counters["key_bytes_per_step"] = key_bytes_per_step;
  state.counters["copied_bytes_per_step"] = copied.PerStep(state.iterations());
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

// The rankings of 2025-26, whose keep scores read the stored keys beyond z
// (keydiff, expected, rkv) or the entropy at birth: scalar double loops in
// core/src/key_stats.cc, set beside tova's step above. rkv compares every
// live key with rkv.sample (64) reference keys: O(live · 64 · planes · dim).
void BM_KeyDiffStep(benchmark::State& state) { RunSteps(state, "keydiff"); }
void BM_ExpectedStep(benchmark::State& state) { RunSteps(state, "expected"); }
void BM_BirthStep(benchmark::State& state) { RunSteps(state, "birth"); }
void BM_RkvStep(benchmark::State& state) { RunSteps(state, "rkv"); }
BENCHMARK(BM_KeyDiffStep)
    ->Arg(8 << 10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ExpectedStep)
    ->Arg(8 << 10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_BirthStep)
    ->Arg(8 << 10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_RkvStep)
    ->Arg(1 << 10)
    ->Arg(8 << 10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// STREAM "Copy" of n doubles: b[i] = a[i]. Not inlined, so that the copy
// and the interleaved comparison (BM_AgainstCopy) time the same code.
[[gnu::noinline]] void CopyOnce(double* __restrict dst,
                                const double* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  benchmark::DoNotOptimize(dst);
  benchmark::ClobberMemory();
}

// The two arrays of a STREAM copy of `bytes` each, written once.
class CopyArrays {
 public:
  explicit CopyArrays(size_t bytes)
      : n_(bytes / sizeof(double)), a_(new double[n_]), b_(new double[n_]) {
    for (size_t i = 0; i < n_; ++i) {
      a_[i] = double(i);
      b_[i] = 0.0;
    }
  }
  void Copy() { CopyOnce(b_.get(), a_.get(), n_); }

 private:
  const size_t n_;
  std::unique_ptr<double[]> a_;
  std::unique_ptr<double[]> b_;
};

// STREAM "Copy" over arrays far larger than the caches; counted as STREAM
// counts it, 2 · 8 bytes an element (one read, one write).
void BM_StreamCopy(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0)) << 20;
  CopyArrays arrays(bytes);
  for (auto _ : state) arrays.Copy();
  state.SetBytesProcessed(int64_t(2 * bytes) * state.iterations());
  state.counters["copy_bytes_per_iter"] = double(2 * bytes);
}
BENCHMARK(BM_StreamCopy)
    ->Arg(256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

#if defined(__x86_64__)
// A read-only stream on one thread: the sum of a 256 MB array, read in
// address order as the summed-query kernel reads a block of keys (16-byte
// loads of the baseline ISA, several in flight, no software prefetch, which
// slowed such a read here). A scoring step only reads its keys, so this is
// the ceiling of one step's key read on one thread; the copy above counts a
// read and a write per element.
void BM_StreamRead(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0)) << 20;
  const size_t n = bytes / sizeof(__m128i);
  // operator new[] aligns to 16 bytes: each pair is one aligned __m128i.
  std::unique_ptr<uint64_t[]> a(new uint64_t[2 * n]);
  for (size_t i = 0; i < 2 * n; ++i) a[i] = i;
  for (auto _ : state) {
    __m128i s0 = _mm_setzero_si128(), s1 = s0, s2 = s0, s3 = s0;
    const __m128i* src = reinterpret_cast<const __m128i*>(a.get());
    for (size_t i = 0; i + 4 <= n; i += 4) {
      s0 = _mm_add_epi64(s0, _mm_load_si128(src + i));
      s1 = _mm_add_epi64(s1, _mm_load_si128(src + i + 1));
      s2 = _mm_add_epi64(s2, _mm_load_si128(src + i + 2));
      s3 = _mm_add_epi64(s3, _mm_load_si128(src + i + 3));
    }
    __m128i total = _mm_add_epi64(_mm_add_epi64(s0, s1), _mm_add_epi64(s2, s3));
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(int64_t(bytes) * state.iterations());
  state.counters["read_bytes_per_iter"] = double(bytes);
}
BENCHMARK(BM_StreamRead)
    ->Arg(256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
#endif  // __x86_64__

// ---------------------------------------------------------------------------
// The Llama-3-8B shape.

}  // namespace

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

namespace {

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
  const CopiedBytes copied(session);
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
  state.counters["copied_bytes_per_step"] = copied.PerStep(state.iterations());
  state.counters["wire_bytes_per_token"] = wire_bytes_per_token;
  state.counters["held_bytes_per_token"] =
      double(stats.bytes_held) / double(stats.live);
}

// ---------------------------------------------------------------------------
// A step's key read against the copy, interleaved (BM_AgainstCopy): each
// round times one copy pass of BM_StreamCopy's 2 x 256 MB, then whole
// periods of steps for at least as long, and takes the ratio of the two
// rates. On a shared machine a neighbour's load changes the copy and the
// step alike within a round, but not between benchmarks run seconds apart,
// so the ratio per round is steadier than the ratio of two benchmarks.

constexpr int kAgainstCopyRounds = 15;

double Quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double at = q * double(values.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (at - double(lo)) * (values[hi] - values[lo]);
}

void RunAgainstCopy(benchmark::State& state, SteadySession& session,
                    double key_bytes_per_step) {
  using Clock = std::chrono::steady_clock;
  const size_t copy_bytes = size_t{256} << 20;
  CopyArrays arrays(copy_bytes);
  // Warm-up, untimed: the arrays' pages are touched, the caches settle.
  arrays.Copy();
  if (!session.RunPeriod()) {
    state.SkipWithError("live count drifted");
    return;
  }
  std::vector<double> ratios, copy_rates, key_rates;
  for (auto _ : state) {
    const Clock::time_point t0 = Clock::now();
    arrays.Copy();
    const Clock::time_point t1 = Clock::now();
    int64_t periods = 0;
    Clock::time_point t2;
    do {
      if (!session.RunPeriod()) {
        state.SkipWithError("live count drifted");
        return;
      }
      ++periods;
      t2 = Clock::now();
    } while (t2 - t1 < t1 - t0);
    const double copy_rate =
        double(2 * copy_bytes) / std::chrono::duration<double>(t1 - t0).count();
    const double key_rate = key_bytes_per_step * double(periods) *
                            session.period() /
                            std::chrono::duration<double>(t2 - t1).count();
    copy_rates.push_back(copy_rate);
    key_rates.push_back(key_rate);
    ratios.push_back(key_rate / copy_rate);
  }
  state.counters["against_copy_p25"] = Quantile(ratios, 0.25);
  state.counters["against_copy_median"] = Quantile(ratios, 0.5);
  state.counters["against_copy_p75"] = Quantile(ratios, 0.75);
  state.counters["copy_bytes_per_second_median"] = Quantile(copy_rates, 0.5);
  state.counters["key_bytes_per_second_median"] = Quantile(key_rates, 0.5);
}

// The summed-query kernel alone (internal::ScoreKeys with a sum and no z),
// at the sketched 8B shape's planes (4 layers x 8 kv heads, 16 f16 elements
// a key, one summed query per kv head), by where its keys live: at 256 live
// they fit in L2 (256 KB), at 4k in L3 (4 MB), at 32k (33.5 MB) they come
// from DRAM on a machine with a 32 MB L3, as in docs/performance.md. Its
// rate where the keys are cached is what its instructions allow; at 32k it
// meets the memory as well.
void BM_SumKernel(benchmark::State& state) {
  const int64_t live = state.range(0);
  constexpr int32_t kLayersSent = 4;
  const int64_t planes = int64_t{kLayersSent} * kKvHeads;
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(planes * live * kSketchDim));
  for (float& x : values) x = normal(rng);
  std::vector<std::byte> keys(values.size() * 2);
  EncodeElements(ElementType::kF16, values.data(), values.size(), keys.data());
  std::vector<float> queries(static_cast<size_t>(planes * kSketchDim));
  for (float& x : queries) x = normal(rng);
  std::vector<double> sum(static_cast<size_t>(live));
  internal::ScoreArgs args{.type = ElementType::kF16,
                           .keys = keys.data(),
                           .capacity = live,
                           .layers = kLayersSent,
                           .kv_heads = kKvHeads,
                           .group = 1,
                           .head_dim = kSketchDim,
                           .live = live,
                           .queries = queries.data(),
                           .z = nullptr,
                           .z_stride = live,
                           .sum = sum.data()};
  internal::ScoreKeys(args);  // Warm-up, untimed.
  for (auto _ : state) {
    std::fill(sum.begin(), sum.end(), 0.0);
    internal::ScoreKeys(args);
    benchmark::DoNotOptimize(sum.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(keys.size()) * state.iterations());
  state.counters["kernel_bytes_per_iter"] = double(keys.size());
}
BENCHMARK(BM_SumKernel)
    ->Arg(256)
    ->Arg(4 << 10)
    ->Arg(32 << 10)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

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

// The same projection by each version this CPU runs (0 scalar, 1 AVX2, 2
// AVX-512; bit-identical, core/src/sketch_project.h), one token's 32 planes.
void BM_SketchKeysByIsa(benchmark::State& state) {
  const internal::ProjectFn versions[] = {
      &internal::ProjectScalar,
#if defined(__x86_64__)
      &internal::ProjectAvx2, &internal::ProjectAvx512,
#endif
  };
  const int64_t isa = state.range(0);
  if (isa >= int64_t(std::size(versions)) ||
      (isa == 1 && !__builtin_cpu_supports("avx2")) ||
      (isa == 2 && !__builtin_cpu_supports("avx512f"))) {
    state.SkipWithError("not on this CPU");
    return;
  }
  constexpr int64_t kPlanes = 4 * 8, kD = 128, kR = 16;
  std::mt19937 rng(17);
  std::normal_distribution<double> normal;
  std::vector<double> p(kPlanes * kD * kR);
  std::vector<float> v(kPlanes * kD), out(kPlanes * kR);
  for (double& x : p) x = normal(rng);
  for (float& x : v) x = static_cast<float>(normal(rng));
  for (auto _ : state) {
    versions[isa](p.data(), v.data(), 1, kPlanes, kD, kR, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SketchKeysByIsa)->Arg(0)->Arg(1)->Arg(2)->UseRealTime();

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

// A decision step's queries on the CPU backend at the exact 8B shape (32
// layers x 32 q heads x 128; Arg 0 the element type: 0 f32, 1 f16, 2 bf16):
// decoded, scaled and summed per GQA group as the scoring kernels read them.
// Arg 1 = 0: the three passes the backend made before (decode, scale in
// place, group sums); 1: internal::PrepareQueries, one pass; both write the
// sums only, as an affinity (entropy) step does.
void BM_QueryPrep(benchmark::State& state) {
  constexpr int64_t kPlanes = int64_t{kModelLayers} * kKvHeads;
  constexpr int32_t kGroup = kQHeads / kKvHeads;
  constexpr int64_t kElements = kPlanes * kGroup * kHeadDim;
  const ElementType type = static_cast<ElementType>(state.range(0));
  std::mt19937 rng(19);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(kElements);
  for (float& x : values) x = normal(rng);
  std::vector<std::byte> sent(kElements * ElementSize(type));
  EncodeElements(type, values.data(), kElements, sent.data());
  const float scale = 1.0f / std::sqrt(float(kHeadDim));
  std::vector<float> decoded(kElements), summed(kPlanes * kHeadDim);
  const bool fused = state.range(1) == 1;
  for (auto _ : state) {
    if (fused) {
      internal::PrepareQueries(type, sent.data(), kPlanes, kGroup, kHeadDim,
                               scale, nullptr, summed.data());
    } else {
      DecodeElements(type, sent.data(), kElements, decoded.data());
      for (float& q : decoded) q *= scale;
      summed.assign(summed.size(), 0.0f);
      for (int64_t lk = 0; lk < kPlanes; ++lk) {
        for (int32_t g = 0; g < kGroup; ++g) {
          const float* q = decoded.data() + (lk * kGroup + g) * kHeadDim;
          for (int64_t j = 0; j < kHeadDim; ++j) {
            summed[lk * kHeadDim + j] += q[j];
          }
        }
      }
    }
    benchmark::DoNotOptimize(summed.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(sent.size()) * state.iterations());
}
BENCHMARK(BM_QueryPrep)
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->UseRealTime();

}  // namespace

void RegisterAgainstCopyBenchmarks() {
  struct Case {
    const char* name;
    SessionConfig config;
  };
  constexpr int64_t kLive = 32 << 10;
  static const auto* cases = new std::vector<Case>{
      {"entropy", DefaultShapeConfig("entropy", kLive)},
      {"8B-exact", ModelConfig(kModelVariants[0], kLive, 1)},
      {"8B-project:16+gsum", ModelConfig(kModelVariants[1], kLive, 1)},
  };
  for (const Case& c : *cases) {
    const std::string name =
        std::string("BM_AgainstCopy/") + c.name + "/" + std::to_string(kLive);
    benchmark::RegisterBenchmark(
        name.c_str(),
        [name, &c](benchmark::State& state) {
          const Shape& shape = c.config.shape;
          RunAgainstCopy(state, CachedSession(name, c.config),
                         double(c.config.budget) *
                             double(shape.key_elements()) *
                             double(ElementSize(shape.element_type)));
        })
        ->Iterations(kAgainstCopyRounds)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
}

std::vector<ModelRow>& ModelRows() {
  static auto* rows = new std::vector<ModelRow>();
  return *rows;
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

}  // namespace entrokv::bench
