// The backend contract (STYLE.md "Tests", backend.h): every compiled backend
// gives the CPU backend's evictions on the same input and its scores within
// float tolerance, for every ranking × budget control × element type ×
// granularity; and enforces its limits with ResourceExhausted.
//
// Instantiated over kCpu always (the CPU compared with itself) and over kCuda
// when it is compiled; kCuda skips when CreateBackend answers Unavailable (no
// device).

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
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

constexpr double kRelTolerance = 1e-3;
constexpr double kAbsTolerance = 1e-6;

std::vector<BackendKind> CompiledBackends() {
  std::vector<BackendKind> kinds = {BackendKind::kCpu};
  if (CudaBackendCompiled()) kinds.push_back(BackendKind::kCuda);
  return kinds;
}

// Creates the backend under test, or skips a CUDA one without a device.
#define ENTROKV_CREATE_OR_SKIP(lhs, kind, options)                        \
  auto lhs##_or = CreateBackend((kind), (options));                       \
  if (!lhs##_or.ok() && (kind) == BackendKind::kCuda &&                   \
      lhs##_or.status().code() == absl::StatusCode::kUnavailable) {       \
    GTEST_SKIP() << "no CUDA device: " << lhs##_or.status();              \
  }                                                                       \
  ASSERT_OK(lhs##_or);                                                    \
  std::unique_ptr<Backend> lhs = std::move(lhs##_or).value()

using ContractParam =
    std::tuple<BackendKind, std::pair<Ranking, BudgetControl>, ElementType,
               int32_t>;

class BackendContractTest : public ::testing::TestWithParam<ContractParam> {
 protected:
  static SessionConfig Config(const ContractParam& p) {
    SessionConfig config;
    config.shape.layers = 2;
    config.shape.kv_heads = 2;
    config.shape.q_heads = 8;
    config.shape.head_dim = 32;
    config.shape.element_type = std::get<2>(p);
    config.budget = 48;
    std::tie(config.ranking, config.budget_control) = std::get<1>(p);
    config.block_size = std::get<3>(p);
    config.protection.sinks = 2;
    config.protection.recent = 4;
    config.streaming_sinks = 4;
    config.seed = 5;
    return config;
  }
};

TEST_P(BackendContractTest, SameEvictionsAndScoresAsTheCpuBackend) {
  const BackendKind kind = std::get<0>(GetParam());
  ENTROKV_CREATE_OR_SKIP(subject_backend, kind, BackendOptions{});
  ASSERT_OK_AND_ASSIGN(auto cpu_backend, CreateBackend(BackendKind::kCpu));
  const SessionConfig config = Config(GetParam());
  ASSERT_OK_AND_ASSIGN(auto subject, subject_backend->CreateSession(config, {}));
  ASSERT_OK_AND_ASSIGN(auto cpu, cpu_backend->CreateSession(config, {}));

  // A prefill of 64, then one entry a step and a burst of 3 now and then;
  // every 29th entry is pinned.
  SyntheticStory story(
      config.shape, /*seed=*/1234,
      [](int t) { return t == 0 ? 64 : (t % 17 == 0 ? 3 : 1); },
      /*pin_every=*/29, /*first_step=*/100);
  int64_t evictions = 0;
  for (int t = 0; t < 240; ++t) {
    const StepInput input = story.Next();

    StepResult want, got;
    StepTrace want_trace, got_trace;
    ASSERT_OK(cpu->Step(input, &want, &want_trace));
    ASSERT_OK(subject->Step(input, &got, &got_trace));
    ASSERT_EQ(got.evicted, want.evicted) << "step " << t;
    ASSERT_EQ(got.live, want.live);
    ASSERT_EQ(got.budget, want.budget) << "step " << t;
    ASSERT_EQ(got.entropy, want.entropy);
    ASSERT_EQ(got_trace.slots, want_trace.slots);
    ASSERT_EQ(got_trace.protected_, want_trace.protected_);
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
      const double g = got_trace.rank_score[i], w = want_trace.rank_score[i];
      if (std::isinf(w)) {
        ASSERT_EQ(g, w) << "rank_score, step " << t << " entry " << i;
      } else {
        ASSERT_TRUE(Near(g, w, kRelTolerance, kAbsTolerance))
            << "rank_score, step " << t << " entry " << i;
      }
    }
    evictions += int64_t(want.evicted.size());
  }
  EXPECT_GT(evictions, 0) << "the run must exercise eviction";
  EXPECT_EQ(subject->LiveSlots(), cpu->LiveSlots());
  const SessionStats a = subject->Stats(), b = cpu->Stats();
  EXPECT_EQ(a.live, b.live);
  EXPECT_EQ(a.peak_live, b.peak_live);
  EXPECT_EQ(a.evicted, b.evicted);
  EXPECT_EQ(a.bytes_held, b.bytes_held);
  EXPECT_EQ(a.placement,
            kind == BackendKind::kCpu ? Placement::kCpu : Placement::kGpu);
}

std::string ContractName(const ::testing::TestParamInfo<ContractParam>& info) {
  const auto& [kind, policy, type, block] = info.param;
  const auto& [ranking, control] = policy;
  return std::string(BackendKindName(kind)) + "_" +
         std::string(RankingName(ranking)) + "_" +
         std::string(BudgetControlName(control)) + "_" +
         std::string(ElementTypeName(type)) +
         (block > 1 ? "_block" + std::to_string(block) : "_token");
}

// A step with a trace ranks every entry; one without may take a shorter
// path (the CPU backend's logit_ema affinity ranks by state and computes σ
// near the selection's boundary only). Both must evict the same entries.
TEST_P(BackendContractTest, ATraceNeverChangesADecision) {
  const BackendKind kind = std::get<0>(GetParam());
  ENTROKV_CREATE_OR_SKIP(backend, kind, BackendOptions{});
  const SessionConfig config = Config(GetParam());
  ASSERT_OK_AND_ASSIGN(auto traced, backend->CreateSession(config, {}));
  ASSERT_OK_AND_ASSIGN(auto plain, backend->CreateSession(config, {}));
  SyntheticStory story(
      config.shape, /*seed=*/99,
      [](int t) { return t == 0 ? 64 : (t % 13 == 0 ? 5 : 1); },
      /*pin_every=*/31, /*first_step=*/7);
  int64_t evictions = 0;
  for (int t = 0; t < 200; ++t) {
    const StepInput input = story.Next();
    StepResult with_trace, without;
    StepTrace trace;
    ASSERT_OK(traced->Step(input, &with_trace, &trace));
    ASSERT_OK(plain->Step(input, &without, nullptr));
    ASSERT_EQ(without.evicted, with_trace.evicted) << "step " << t;
    ASSERT_EQ(without.budget, with_trace.budget) << "step " << t;
    evictions += int64_t(without.evicted.size());
  }
  EXPECT_GT(evictions, 0) << "the run must exercise eviction";
}

INSTANTIATE_TEST_SUITE_P(
    EveryPolicy, BackendContractTest,
    ::testing::Combine(::testing::ValuesIn(CompiledBackends()),
                       ::testing::ValuesIn(AllPolicies()),
                       ::testing::Values(ElementType::kF32, ElementType::kF16,
                                         ElementType::kBf16),
                       ::testing::Values(1, 4)),
    ContractName);

// Limits, per backend.
class BackendLimitsTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  static SessionConfig Config() {
    SessionConfig config = testing::TinyConfig(
        Ranking::kWindow, BudgetControl::kFixed, /*budget=*/4);
    config.shape.head_dim = 8;  // 32 bytes of f32 keys + 40: 72 an entry.
    return config;
  }
  static StepBuilder Appending(uint64_t first, int n) {
    StepBuilder builder(Config().shape);
    for (int i = 0; i < n; ++i) {
      builder.Append(first + i, std::vector<float>(8, 0.5f + i));
    }
    builder.Query(std::vector<float>(8, 0.1f));
    return builder;
  }
};

TEST_P(BackendLimitsTest, TheByteLimitIsResourceExhausted) {
  BackendOptions options;
  options.max_bytes = 6 * 72;
  ENTROKV_CREATE_OR_SKIP(backend, GetParam(), options);
  ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(Config(), {}));
  StepResult result;
  ASSERT_OK(session->Step(Appending(0, 6).Build(1), &result));  // 6 -> 4.
  EXPECT_EQ(session->Stats().bytes_held, 4 * 72);
  const absl::Status refused = session->Step(Appending(10, 3).Build(2), &result);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("append"));
  EXPECT_EQ(session->Stats().live, 4);
  EXPECT_EQ(session->Stats().bytes_held, 4 * 72);
  EXPECT_EQ(backend->bytes_held(), 4 * 72);
  EXPECT_OK(session->Step(Appending(10, 2).Build(2), &result));
}

TEST_P(BackendLimitsTest, MaxLiveEntriesIsResourceExhausted) {
  ENTROKV_CREATE_OR_SKIP(backend, GetParam(), BackendOptions{});
  SessionLimits limits;
  limits.max_live_entries = 5;
  ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(Config(), limits));
  StepResult result;
  const absl::Status refused = session->Step(Appending(0, 6).Build(1), &result);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("append.slot_ids"));
  EXPECT_EQ(session->Stats().live, 0);
  ASSERT_OK(session->Step(Appending(0, 5).Build(1), &result));  // 5 -> 4.
  EXPECT_EQ(result.live, 4);
  EXPECT_STATUS_CODE(session->Step(Appending(10, 2).Build(2), &result),
                     absl::StatusCode::kResourceExhausted);
  EXPECT_OK(session->Step(Appending(10, 1).Build(2), &result));
}

// The demote tier (docs/step-semantics.md section 12) runs on the CPU
// backend; the CUDA backend refuses it until it implements the section.
TEST_P(BackendLimitsTest, ADemoteTierIsRefusedWhereItIsNotImplemented) {
  ENTROKV_CREATE_OR_SKIP(backend, GetParam(), BackendOptions{});
  SessionConfig config =
      testing::TinyConfig(Ranking::kTova, BudgetControl::kFixed, 4);
  config.tier.capacity = 8;
  auto session = backend->CreateSession(config, {});
  if (GetParam() == BackendKind::kCpu) {
    EXPECT_OK(session);
    return;
  }
  EXPECT_STATUS_CODE(session.status(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(session.status().message()),
              HasSubstr("tier.capacity"));
}

INSTANTIATE_TEST_SUITE_P(
    Compiled, BackendLimitsTest, ::testing::ValuesIn(CompiledBackends()),
    [](const auto& info) { return std::string(BackendKindName(info.param)); });

}  // namespace
}  // namespace entrokv
