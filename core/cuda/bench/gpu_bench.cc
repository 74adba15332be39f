// entrokv-bench-gpu: the CUDA backend's step against the device's own copy
// bandwidth, measured in the same run (docs/design.md "Performance model").
//
// Cases: one step at 32k and 128k live entries x 4 and 32 layers x 8 kv heads
// x 32 q heads x head_dim 128, f16, for a ranking that needs the attention
// (tova: scores, softmax statistics, aggregation, selection) and one that
// needs only the mean logit (affinity). Each timed step appends one entry and
// evicts one, as a decode step does at steady state. Reported: the median step
// latency, the bytes of keys read per second (live x layers x kv_heads x
// head_dim x 2 bytes per step) and that rate as a share of the copy bandwidth
// (cudaMemcpy device-to-device, counted as bytes read + bytes written).
// Then 256 sessions of 4096 live entries x 4 layers, stepped one after the
// other from one host thread, and from 16 host threads (each session has its
// own stream; there is no batched single launch).
//
// Exits 0 with a message when no CUDA device is present.
//
// Usage: entrokv-bench-gpu [--quick]   (--quick: 32k entries only)

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"

namespace entrokv {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

bool Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "cuda error in %s: %s\n", what, cudaGetErrorString(err));
  return false;
}

// Device-to-device copy bandwidth, bytes read + written per second.
std::optional<double> CopyBandwidth() {
  size_t free_bytes = 0, total_bytes = 0;
  if (!Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo")) {
    return std::nullopt;
  }
  const size_t bytes = std::min<size_t>(size_t{1} << 30, free_bytes / 4);
  void* a = nullptr;
  void* b = nullptr;
  if (!Check(cudaMalloc(&a, bytes), "cudaMalloc") ||
      !Check(cudaMalloc(&b, bytes), "cudaMalloc")) {
    cudaFree(a);
    return std::nullopt;
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  bool ok = Check(cudaMemset(a, 1, bytes), "cudaMemset");
  for (int i = 0; ok && i < 2; ++i) {
    ok = Check(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "warm-up");
  }
  constexpr int kIters = 10;
  ok = ok && Check(cudaEventRecord(start), "cudaEventRecord");
  for (int i = 0; ok && i < kIters; ++i) {
    ok = Check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice),
               "cudaMemcpyAsync");
  }
  ok = ok && Check(cudaEventRecord(stop), "cudaEventRecord") &&
       Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0.0f;
  if (ok) ok = Check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  if (!ok || ms <= 0.0f) return std::nullopt;
  return 2.0 * static_cast<double>(bytes) * kIters / (ms * 1e-3);
}

Shape BenchShape(int32_t layers) {
  Shape s;
  s.layers = layers;
  s.kv_heads = 8;
  s.q_heads = 32;
  s.head_dim = 128;
  s.element_type = ElementType::kF16;
  return s;
}

// Pre-encoded pseudo-random f16 keys (a chunk, reused for every append) and
// queries for one shape, shared by the sessions of a case.
struct Inputs {
  Inputs(const Shape& shape, int64_t entries) : chunk_entries(entries) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    auto next = [&x] {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) /
             static_cast<float>(1 << 23);
    };
    std::vector<float> values(
        static_cast<size_t>(entries * shape.key_elements()));
    for (float& v : values) v = next();
    keys.resize(values.size() * 2);
    EncodeElements(ElementType::kF16, values.data(), values.size(),
                   keys.data());
    std::vector<float> q(static_cast<size_t>(shape.query_elements()));
    for (float& v : q) v = next();
    queries.resize(q.size() * 2);
    EncodeElements(ElementType::kF16, q.data(), q.size(), queries.data());
  }
  int64_t chunk_entries;
  std::vector<std::byte> keys;
  std::vector<std::byte> queries;
};

// Drives one session: bulk fills, then decode steps of one entry each.
class Driver {
 public:
  Driver(const Shape& shape, std::unique_ptr<SessionState> session,
         const Inputs* inputs)
      : shape_(shape), session_(std::move(session)), inputs_(inputs) {}

  absl::Status Append(int64_t count) {
    while (count > 0) {
      const int64_t m = std::min(count, inputs_->chunk_entries);
      ids_.resize(static_cast<size_t>(m));
      for (uint64_t& id : ids_) id = next_slot_++;
      StepInput in;
      in.step = step_++;
      in.append.slot_ids = ids_;
      in.append.keys = absl::MakeConstSpan(
          inputs_->keys.data(),
          static_cast<size_t>(m * shape_.key_elements() * 2));
      in.queries = inputs_->queries;
      in.entropy = 1.0 + 0.1 * static_cast<double>(step_ % 7);
      StepResult result;
      absl::Status st = session_->Step(in, &result);
      if (!st.ok()) return st;
      count -= m;
    }
    return absl::OkStatus();
  }

  SessionState& session() { return *session_; }

 private:
  Shape shape_;
  std::unique_ptr<SessionState> session_;
  const Inputs* inputs_;
  uint64_t next_slot_ = 1;
  uint64_t step_ = 1;
  std::vector<uint64_t> ids_;
};

absl::StatusOr<std::unique_ptr<Driver>> MakeDriver(Backend& backend,
                                                   const Shape& shape,
                                                   Ranking ranking,
                                                   int64_t live,
                                                   const Inputs* inputs) {
  SessionConfig config;
  config.shape = shape;
  config.ranking = ranking;
  config.budget_control = BudgetControl::kFixed;
  config.budget = live;
  config.protection.sinks = 4;
  config.protection.recent = 16;
  absl::StatusOr<std::unique_ptr<SessionState>> session =
      backend.CreateSession(config, SessionLimits{});
  if (!session.ok()) return session.status();
  auto driver =
      std::make_unique<Driver>(shape, std::move(session).value(), inputs);
  absl::Status st = driver->Append(live);
  if (!st.ok()) return st;
  return driver;
}

// The single-session rows: one step at each size, layer count and ranking.
// Returns the exit status: 1 when a step fails.
int RunSessionCases(Backend& backend, double copy_bw, bool quick) {
  const int64_t sizes[] = {32768, 131072};
  const int32_t layer_counts[] = {4, 32};
  const Ranking rankings[] = {Ranking::kTova, Ranking::kAffinity};
  for (int64_t live : sizes) {
    if (quick && live > 32768) continue;
    for (int32_t layers : layer_counts) {
      for (Ranking ranking : rankings) {
        const Shape shape = BenchShape(layers);
        const Inputs inputs(
            shape, std::max<int64_t>(
                       1, (int64_t{64} << 20) / (shape.key_elements() * 2)));
        absl::StatusOr<std::unique_ptr<Driver>> driver =
            MakeDriver(backend, shape, ranking, live, &inputs);
        if (!driver.ok()) {
          std::printf("%-9s %7lld %6d   skipped: %s\n",
                      std::string(RankingName(ranking)).c_str(),
                      static_cast<long long>(live), layers,
                      driver.status().ToString().c_str());
          continue;
        }
        std::vector<double> times;
        for (int i = 0; i < 23; ++i) {
          const Clock::time_point t0 = Clock::now();
          absl::Status st = (*driver)->Append(1);
          const double t = Seconds(Clock::now() - t0);
          if (!st.ok()) {
            std::fprintf(stderr, "step failed: %s\n", st.ToString().c_str());
            return 1;
          }
          if (i >= 3) times.push_back(t);
        }
        const double median = Median(times);
        // Keys read: the live entries after the step's append.
        const double bytes = static_cast<double>(live + 1) *
                             static_cast<double>(shape.key_elements()) * 2.0;
        std::printf("%-9s %7lld %6d %10.1f %11.1f %11.1f %8.2f\n",
                    std::string(RankingName(ranking)).c_str(),
                    static_cast<long long>(live), layers, median * 1e6,
                    bytes / 1e6, bytes / median / 1e9,
                    bytes / median / copy_bw);
      }
    }
  }
  return 0;
}

// Many sessions: 256 of 4096 live entries x 4 layers, stepped from one host
// thread and from 16. Returns the exit status.
int RunManySessions(Backend& backend, double copy_bw) {
  constexpr int kSessions = 256;
  constexpr int64_t kLive = 4096;
  constexpr int kThreads = 16;
  const Shape shape = BenchShape(4);
  const Inputs inputs(shape, kLive);
  std::vector<std::unique_ptr<Driver>> drivers;
  for (int i = 0; i < kSessions; ++i) {
    absl::StatusOr<std::unique_ptr<Driver>> d =
        MakeDriver(backend, shape, Ranking::kTova, kLive, &inputs);
    if (!d.ok()) {
      std::printf("\n256 sessions: skipped after %d sessions: %s\n", i,
                  d.status().ToString().c_str());
      return 0;
    }
    drivers.push_back(std::move(d).value());
  }
  auto round_sequential = [&]() -> double {
    const Clock::time_point t0 = Clock::now();
    for (auto& d : drivers) {
      if (!d->Append(1).ok()) return -1.0;
    }
    return Seconds(Clock::now() - t0);
  };
  auto round_threaded = [&]() -> double {
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> threads;
    std::vector<int> failed(kThreads, 0);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = t; i < kSessions; i += kThreads) {
          if (!drivers[static_cast<size_t>(i)]->Append(1).ok()) failed[t] = 1;
        }
      });
    }
    for (std::thread& th : threads) th.join();
    const double s = Seconds(Clock::now() - t0);
    return std::count(failed.begin(), failed.end(), 1) > 0 ? -1.0 : s;
  };
  std::vector<double> seq, thr;
  for (int r = 0; r < 7; ++r) {
    const double a = round_sequential();
    const double b = round_threaded();
    if (a < 0 || b < 0) {
      std::fprintf(stderr, "a many-session step failed\n");
      return 1;
    }
    if (r >= 2) {
      seq.push_back(a);
      thr.push_back(b);
    }
  }
  const double bytes = static_cast<double>(kSessions) *
                       static_cast<double>(kLive + 1) *
                       static_cast<double>(shape.key_elements()) * 2.0;
  std::printf(
      "\n%d sessions x %lld live x 4 layers (tova), one step each:\n"
      "  sequential, 1 host thread:            %9.1f us per round "
      "(%.1f us per session), keys %.1f GB/s (%.2f of copy)\n"
      "  %d host threads, per-session streams: %9.1f us per round "
      "(%.1f us per session), keys %.1f GB/s (%.2f of copy)\n"
      "  (no batched single launch: each session's step is its own launch "
      "sequence)\n",
      kSessions, static_cast<long long>(kLive), Median(seq) * 1e6,
      Median(seq) * 1e6 / kSessions, bytes / Median(seq) / 1e9,
      bytes / Median(seq) / copy_bw, kThreads, Median(thr) * 1e6,
      Median(thr) * 1e6 / kSessions, bytes / Median(thr) / 1e9,
      bytes / Median(thr) / copy_bw);
  return 0;
}

int Run(bool quick) {
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateBackend(BackendKind::kCuda);
  if (!backend.ok()) {
    std::printf("entrokv-bench-gpu: no CUDA device, nothing to measure (%s)\n",
                backend.status().ToString().c_str());
    return 0;
  }
  std::printf("device: %s\n", (*backend)->Describe().c_str());
  const std::optional<double> copy_bw = CopyBandwidth();
  if (!copy_bw.has_value()) {
    std::fprintf(stderr, "could not measure the copy bandwidth\n");
    return 1;
  }
  std::printf("copy bandwidth (cudaMemcpy D2D, read+write): %.1f GB/s\n\n",
              *copy_bw / 1e9);
  std::printf("%-9s %7s %6s %10s %11s %11s %9s\n", "ranking", "live", "layers",
              "step_us", "keys_MB", "keys_GB/s", "of_copy");

  if (const int rc = RunSessionCases(**backend, *copy_bw, quick); rc != 0) {
    return rc;
  }
  return RunManySessions(**backend, *copy_bw);
}

}  // namespace
}  // namespace entrokv

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
  }
  return entrokv::Run(quick);
}
