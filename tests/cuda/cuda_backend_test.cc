// Tests of the CUDA backend beyond the backend contract suite
// (tests/core/backend_contract_test.cc), which already compares every policy
// on one small shape.
//
// Here: the GPU's evictions equal the CPU's on the same synthetic stream for
// every ranking x budget control x element type x granularity, on a shape that
// takes the vectorised scoring kernel (head_dim 128) and on one that takes the
// generic kernel (head_dim 24, 12 q heads per kv head), through capacity
// growth, steps without appends, append bursts, both affinity update rules and
// both block reductions; the byte limit and device memory exhaustion are
// ResourceExhausted and leave sessions usable; many sessions on many threads;
// and CreateBackend(kCuda) answers Unavailable without a device.
//
// Expected values come from the CPU backend (an independent implementation of
// docs/step-semantics.md) or are computed by hand. Every test that needs a
// device skips without one.

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core_test_util.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/synthetic.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::Near;
using ::entrokv::testing::StepBuilder;
using ::entrokv::testing::SyntheticStory;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr double kRelTolerance = 1e-3;
constexpr double kAbsTolerance = 1e-6;

bool DevicePresent() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

#define SKIP_WITHOUT_DEVICE() \
  if (!DevicePresent()) GTEST_SKIP() << "no CUDA device"

enum class ShapeKind : uint8_t {
  kWide,  // head_dim 128, 4 q heads per kv head: the vectorised kernel.
  kOdd,   // head_dim 24, 12 q heads per kv head: the generic kernel.
};

Shape MakeShape(ShapeKind kind, ElementType type) {
  Shape s;
  if (kind == ShapeKind::kWide) {
    s.layers = 2;
    s.kv_heads = 2;
    s.q_heads = 8;
    s.head_dim = 128;
  } else {
    s.layers = 3;
    s.kv_heads = 1;
    s.q_heads = 12;
    s.head_dim = 24;
  }
  s.element_type = type;
  return s;
}

using Param = std::tuple<ShapeKind, std::pair<Ranking, BudgetControl>,
                         ElementType, int32_t>;

SessionConfig ConfigFor(const Param& p) {
  SessionConfig config;
  config.shape = MakeShape(std::get<0>(p), std::get<2>(p));
  config.budget = 64;
  std::tie(config.ranking, config.budget_control) = std::get<1>(p);
  config.block_size = std::get<3>(p);
  // Both block reductions and both affinity rules across the sweep.
  config.block_reduce = static_cast<int>(config.ranking) % 2 == 1
                            ? BlockReduce::kMax
                            : BlockReduce::kMean;
  config.affinity.update = config.budget_control == BudgetControl::kFixed
                               ? AffinityUpdate::kSeed
                               : AffinityUpdate::kLogitEma;
  config.protection.sinks = 3;
  config.protection.recent = 5;
  config.streaming_sinks = 4;
  config.h2o.recent_fraction = 0.3;
  config.seed = 11;
  return config;
}

// Steps `gpu` and `cpu` (sessions of `config`) through the same synthetic
// stream and expects the same answers and traces. A prefill of 40 (the
// initial capacity is 64, so later steps grow it), then one entry a step, a
// burst of 5 every 13th step and none every 23rd; every 31st entry pinned.
// Returns the evictions seen through `evictions`.
void RunSideBySide(const SessionConfig& config, uint64_t seed, int steps,
                   SessionState& gpu, SessionState& cpu, int64_t* evictions) {
  SyntheticStory story(
      config.shape, seed,
      [](int t) {
        return t == 0 ? 40 : (t % 23 == 0 ? 0 : (t % 13 == 0 ? 5 : 1));
      },
      /*pin_every=*/31, /*first_step=*/7);
  story.DrawAhead();
  *evictions = 0;
  for (int t = 0; t < steps; ++t) {
    const StepInput input = story.Next();

    StepResult want, got;
    StepTrace want_trace, got_trace;
    ASSERT_OK(cpu.Step(input, &want, &want_trace));
    ASSERT_OK(gpu.Step(input, &got, &got_trace));
    ASSERT_EQ(got.evicted, want.evicted) << "step " << t;
    ASSERT_EQ(got.live, want.live) << "step " << t;
    ASSERT_EQ(got.budget, want.budget) << "step " << t;
    ASSERT_EQ(got.entropy, want.entropy) << "step " << t;
    ASSERT_EQ(got_trace.slots, want_trace.slots) << "step " << t;
    ASSERT_EQ(got_trace.protected_, want_trace.protected_) << "step " << t;
    ASSERT_EQ(got_trace.mean_logit.size(), want_trace.slots.size());
    ASSERT_EQ(got_trace.attention.size(), want_trace.slots.size());
    ASSERT_EQ(got_trace.rank_score.size(), want_trace.slots.size());
    for (size_t i = 0; i < want_trace.slots.size(); ++i) {
      ASSERT_TRUE(Near(got_trace.mean_logit[i], want_trace.mean_logit[i],
                       kRelTolerance, kAbsTolerance))
          << "mean_logit, step " << t << " entry " << i;
      ASSERT_TRUE(Near(got_trace.attention[i], want_trace.attention[i],
                       kRelTolerance, kAbsTolerance))
          << "attention, step " << t << " entry " << i;
      const double g = got_trace.rank_score[i];
      const double w = want_trace.rank_score[i];
      if (std::isinf(w) || config.ranking == Ranking::kKeyNorm ||
          config.ranking == Ranking::kWindow ||
          config.ranking == Ranking::kStreaming ||
          config.ranking == Ranking::kRandom) {
        // Computed from the same inputs in the same order: bit-identical.
        ASSERT_EQ(g, w) << "rank_score, step " << t << " entry " << i;
      } else {
        ASSERT_TRUE(Near(g, w, kRelTolerance, kAbsTolerance))
            << "rank_score, step " << t << " entry " << i;
      }
    }
    *evictions += static_cast<int64_t>(want.evicted.size());
  }
  EXPECT_EQ(gpu.LiveSlots(), cpu.LiveSlots());
  const SessionStats a = gpu.Stats();
  const SessionStats b = cpu.Stats();
  EXPECT_EQ(a.live, b.live);
  EXPECT_EQ(a.peak_live, b.peak_live);
  EXPECT_EQ(a.appended, b.appended);
  EXPECT_EQ(a.evicted, b.evicted);
  EXPECT_EQ(a.bytes_held, b.bytes_held);
  EXPECT_EQ(a.placement, Placement::kGpu);
}

class CudaMatchesCpuTest : public ::testing::TestWithParam<Param> {};

TEST_P(CudaMatchesCpuTest, SameEvictionsAndScoresOnASyntheticStream) {
  SKIP_WITHOUT_DEVICE();
  ASSERT_OK_AND_ASSIGN(auto gpu_backend, CreateBackend(BackendKind::kCuda));
  ASSERT_OK_AND_ASSIGN(auto cpu_backend, CreateBackend(BackendKind::kCpu));
  const SessionConfig config = ConfigFor(GetParam());
  ASSERT_OK_AND_ASSIGN(auto gpu, gpu_backend->CreateSession(config, {}));
  ASSERT_OK_AND_ASSIGN(auto cpu, cpu_backend->CreateSession(config, {}));
  int64_t evictions = 0;
  RunSideBySide(config, /*seed=*/99, /*steps=*/260, *gpu, *cpu, &evictions);
  EXPECT_GT(evictions, 0) << "the run must exercise eviction";
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto& [shape, policy, type, block] = info.param;
  const auto& [ranking, control] = policy;
  return std::string(shape == ShapeKind::kWide ? "d128_" : "d24g12_") +
         std::string(RankingName(ranking)) + "_" +
         std::string(BudgetControlName(control)) + "_" +
         std::string(ElementTypeName(type)) +
         (block > 1 ? "_block" + std::to_string(block) : "_token");
}

INSTANTIATE_TEST_SUITE_P(
    EveryPolicy, CudaMatchesCpuTest,
    ::testing::Combine(::testing::Values(ShapeKind::kWide, ShapeKind::kOdd),
                       ::testing::ValuesIn(AllPolicies()),
                       ::testing::Values(ElementType::kF32, ElementType::kF16,
                                         ElementType::kBf16),
                       ::testing::Values(1, 8)),
    ParamName);

TEST(CudaBackendTest, IsCompiledIn) { EXPECT_TRUE(CudaBackendCompiled()); }

TEST(CudaBackendTest, CreateBackendAnswersUnavailableWithoutADevice) {
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateBackend(BackendKind::kCuda);
  if (DevicePresent()) {
    ASSERT_OK(backend);
    EXPECT_EQ((*backend)->kind(), BackendKind::kCuda);
    EXPECT_THAT((*backend)->Describe(), StartsWith("cuda:0 "));
    EXPECT_EQ((*backend)->bytes_held(), 0);
    return;
  }
  EXPECT_STATUS_CODE(backend, absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(backend.status().message()), HasSubstr("cuda"));
}

TEST(CudaBackendTest, AnAbsentDeviceOrdinalIsUnavailable) {
  BackendOptions options;
  options.device = 4096;
  EXPECT_STATUS_CODE(CreateBackend(BackendKind::kCuda, options),
                     absl::StatusCode::kUnavailable);
}

// Key bytes 2 layers x 2 kv heads x 128 x 2 bytes = 1024, + 40 of state.
constexpr int64_t kLimitEntryBytes = 1064;

SessionConfig LimitConfig() {
  SessionConfig config;
  config.shape = MakeShape(ShapeKind::kWide, ElementType::kF16);
  config.ranking = Ranking::kWindow;
  config.budget_control = BudgetControl::kFixed;
  config.budget = 100;  // Nothing is evicted in these tests.
  return config;
}

StepBuilder Appending(uint64_t first, int n) {
  const Shape shape = LimitConfig().shape;
  StepBuilder builder(shape);
  for (int i = 0; i < n; ++i) {
    builder.Append(first + i,
                   std::vector<float>(shape.key_elements(), 0.25f * (i + 1)));
  }
  builder.Query(std::vector<float>(shape.query_elements(), 0.5f));
  return builder;
}

TEST(CudaBackendTest, TheByteLimitIsSharedBySessionsAndIsResourceExhausted) {
  SKIP_WITHOUT_DEVICE();
  BackendOptions options;
  options.max_bytes = 10 * kLimitEntryBytes;
  ASSERT_OK_AND_ASSIGN(auto backend,
                       CreateBackend(BackendKind::kCuda, options));
  ASSERT_OK_AND_ASSIGN(auto a, backend->CreateSession(LimitConfig(), {}));
  ASSERT_OK_AND_ASSIGN(auto b, backend->CreateSession(LimitConfig(), {}));
  StepResult result;
  ASSERT_OK(a->Step(Appending(0, 8).Build(1), &result));
  EXPECT_EQ(backend->bytes_held(), 8 * kLimitEntryBytes);

  const absl::Status refused = b->Step(Appending(100, 3).Build(1), &result);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("append"));
  EXPECT_EQ(b->Stats().live, 0);
  EXPECT_EQ(backend->bytes_held(), 8 * kLimitEntryBytes);

  // The refused step left no trace: the same step number is accepted.
  ASSERT_OK(b->Step(Appending(100, 2).Build(1), &result));
  EXPECT_EQ(result.live, 2);
  EXPECT_EQ(backend->bytes_held(), 10 * kLimitEntryBytes);
  EXPECT_STATUS_CODE(a->Step(Appending(200, 1).Build(2), &result),
                     absl::StatusCode::kResourceExhausted);

  // Closing a session returns its bytes.
  b.reset();
  EXPECT_EQ(backend->bytes_held(), 8 * kLimitEntryBytes);
  ASSERT_OK(a->Step(Appending(200, 2).Build(2), &result));
  EXPECT_EQ(a->LiveSlots(),
            (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 200, 201}));
}

TEST(CudaBackendTest, DeviceMemoryExhaustionIsResourceExhaustedNotACrash) {
  SKIP_WITHOUT_DEVICE();
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  // 2^24 query rows of head_dim 1: the scores of one entry take 64 MiB, so
  // an append of `n` entries needs twice the device's memory for them.
  SessionConfig config;
  config.shape.layers = 256;
  config.shape.kv_heads = 1;
  config.shape.q_heads = 65536;
  config.shape.head_dim = 1;
  config.shape.element_type = ElementType::kF16;
  config.ranking = Ranking::kTova;
  config.budget_control = BudgetControl::kFixed;
  const int64_t per_entry = int64_t{4} << 24;
  const int64_t n = 2 * static_cast<int64_t>(total_bytes) / per_entry + 16;
  config.budget = n + 16;
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCuda));
  ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(config, {}));

  const std::vector<float> key(config.shape.key_elements(), 0.5f);
  const std::vector<float> query(config.shape.query_elements(), 0.01f);
  StepBuilder big(config.shape);
  for (int64_t i = 0; i < n; ++i) big.Append(uint64_t(i), key);
  big.Query(query).Entropy(1.0);
  StepResult result;
  const absl::Status refused = session->Step(big.Build(1), &result);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(session->Stats().live, 0);
  EXPECT_EQ(backend->bytes_held(), 0);

  // The session is intact: a small step (the same step number) succeeds.
  StepBuilder small(config.shape);
  for (int i = 0; i < 4; ++i) small.Append(uint64_t(1000 + i), key);
  small.Query(query).Entropy(1.0);
  ASSERT_OK(session->Step(small.Build(1), &result));
  EXPECT_EQ(result.live, 4);
  EXPECT_EQ(session->LiveSlots(),
            (std::vector<uint64_t>{1000, 1001, 1002, 1003}));
}

TEST(CudaBackendTest, ManySessionsOnManyThreadsEachMatchTheCpu) {
  SKIP_WITHOUT_DEVICE();
  ASSERT_OK_AND_ASSIGN(auto gpu_backend, CreateBackend(BackendKind::kCuda));
  ASSERT_OK_AND_ASSIGN(auto cpu_backend, CreateBackend(BackendKind::kCpu));
  constexpr int kThreads = 4;
  constexpr int kSessionsPerThread = 3;
  const Param param{ShapeKind::kWide,
                    {Ranking::kAffinity, BudgetControl::kEntropy},
                    ElementType::kF16,
                    1};
  const SessionConfig config = ConfigFor(param);
  std::vector<std::thread> threads;
  std::vector<int64_t> evictions(kThreads * kSessionsPerThread, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int s = 0; s < kSessionsPerThread; ++s) {
        const int id = t * kSessionsPerThread + s;
        auto gpu = gpu_backend->CreateSession(config, {});
        auto cpu = cpu_backend->CreateSession(config, {});
        ASSERT_OK(gpu);
        ASSERT_OK(cpu);
        RunSideBySide(config, /*seed=*/1000 + id, /*steps=*/120, **gpu, **cpu,
                      &evictions[id]);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int64_t e : evictions) EXPECT_GT(e, 0);
  EXPECT_EQ(gpu_backend->bytes_held(), 0);
}

}  // namespace
}  // namespace entrokv
