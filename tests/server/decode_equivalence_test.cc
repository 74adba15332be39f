// The server's evictions equal core's in-process decisions on the same
// synthetic stream, for every ranking × budget controller (and for blocks).

#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::testing::ElementsAreArray;

class DecodeEquivalenceTest
    : public ServerTest,
      public ::testing::WithParamInterface<std::pair<Ranking, BudgetControl>> {
 protected:
  // Runs `steps` steps of one synthetic stream through the server and through
  // an in-process CPU session, and compares every step's answer.
  void ExpectSameDecisions(const SessionConfig& config, int steps,
                           int pin_every, int logits_every) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> backend,
                         CreateBackend(BackendKind::kCpu));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SessionState> reference,
                         backend->CreateSession(config, SessionLimits{}));
    ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                         CreateSession(stub_.get(), ToWireConfig(config)));
    const std::string id = created.session_id();
    DecodeStream stream(stub_.get());
    ASSERT_OK(stream.Attach(id));
    WireStepSource source(config.shape, /*seed=*/17, id, /*prefill=*/12,
                          /*first_slot=*/5000, pin_every, logits_every);
    int64_t total_evicted = 0;
    for (int t = 0; t < steps; ++t) {
      SCOPED_TRACE(absl::StrCat("step ", t));
      const v1::SessionStep step = source.Next();
      CoreStep core_step = ToCoreStep(step);
      StepResult expected;
      ASSERT_OK(reference->Step(core_step.input, &expected));
      ASSERT_OK_AND_ASSIGN(v1::SessionStepResult got, stream.Step(step));
      ASSERT_THAT(got.evicted(), ElementsAreArray(expected.evicted));
      ASSERT_EQ(got.live(), expected.live);
      ASSERT_EQ(got.budget(), expected.budget);
      ASSERT_DOUBLE_EQ(got.entropy(), expected.entropy);
      EXPECT_EQ(got.session_id(), id);
      EXPECT_EQ(got.step(), step.step());
      total_evicted += got.evicted_size();
    }
    // The run must have exercised eviction, or the comparison says little.
    EXPECT_GT(total_evicted, 0);

    const SessionStats want = reference->Stats();
    ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
    EXPECT_EQ(info.stats().live(), want.live);
    EXPECT_EQ(info.stats().peak_live(), want.peak_live);
    EXPECT_EQ(info.stats().steps(), want.steps);
    EXPECT_EQ(info.stats().appended(), want.appended);
    EXPECT_EQ(info.stats().evicted(), want.evicted);
    EXPECT_EQ(info.stats().budget(), want.budget);
    EXPECT_EQ(info.stats().bytes_held(), want.bytes_held);
    ASSERT_TRUE(want.last_step.has_value());
    EXPECT_EQ(info.stats().last_step(), *want.last_step);
    EXPECT_OK(stream.Close());
  }
};

TEST_P(DecodeEquivalenceTest, EvictsExactlyAsCoreInProcess) {
  StartServer();
  SessionConfig config;
  config.shape = SmallShape(ElementType::kF16);
  config.budget = 24;
  config.ranking = std::get<0>(GetParam());
  config.budget_control = std::get<1>(GetParam());
  config.protection.sinks = 2;
  config.protection.recent = 3;
  config.seed = 99;
  config.placement = Placement::kCpu;
  ExpectSameDecisions(config, /*steps=*/120, /*pin_every=*/17,
                      /*logits_every=*/5);
}

INSTANTIATE_TEST_SUITE_P(
    EveryPolicy, DecodeEquivalenceTest,
    ::testing::ValuesIn(AllPolicies()),
    [](const ::testing::TestParamInfo<DecodeEquivalenceTest::ParamType>& info) {
      return absl::StrCat(
          std::string(RankingName(std::get<0>(info.param))), "_",
          std::string(BudgetControlName(std::get<1>(info.param))));
    });

class DecodeEquivalenceVariantsTest : public DecodeEquivalenceTest {};

TEST_F(DecodeEquivalenceVariantsTest, BlocksInBf16WithSeedAffinity) {
  StartServer();
  SessionConfig config;
  config.shape = SmallShape(ElementType::kBf16);
  config.budget = 48;
  config.ranking = Ranking::kAffinity;
  config.budget_control = BudgetControl::kEntropy;
  config.affinity.update = AffinityUpdate::kSeed;
  config.block_size = 4;
  config.block_reduce = BlockReduce::kMax;
  config.placement = Placement::kCpu;
  ExpectSameDecisions(config, /*steps=*/150, /*pin_every=*/0,
                      /*logits_every=*/0);
}

TEST_F(DecodeEquivalenceVariantsTest, F32WithH2oAndTightEntropyBounds) {
  StartServer();
  SessionConfig config;
  config.shape = SmallShape(ElementType::kF32);
  config.budget = 20;
  config.ranking = Ranking::kH2o;
  config.budget_control = BudgetControl::kEntropy;
  config.entropy_budget.gamma = 0.9;
  config.entropy_budget.min_budget = 12;
  config.entropy_budget.max_budget = 30;
  config.h2o.recent_fraction = 0.25;
  config.placement = Placement::kCpu;
  ExpectSameDecisions(config, /*steps=*/100, /*pin_every=*/0,
                      /*logits_every=*/3);
}

// On a server with a CUDA device, a gpu session answers as core's CPU
// backend does (the backend contract); skipped where there is no device.
TEST_F(DecodeEquivalenceVariantsTest, GpuPlacementMatchesCpuDecisions) {
  ServerOptions options = TestServerOptions();
  options.use_gpu = true;
  StartServer(options);
  ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse list,
                       ListSessions(stub_.get()));
  if (!list.server().gpu_available()) {
    GTEST_SKIP() << "no CUDA device on this machine";
  }
  for (const Ranking ranking : {Ranking::kAffinity, Ranking::kH2o}) {
    SessionConfig config;
    config.shape = SmallShape(ElementType::kF16);
    config.budget = 32;
    config.ranking = ranking;
    config.budget_control = BudgetControl::kEntropy;
    config.placement = Placement::kGpu;
    // The reference is core's CPU backend: the same config, placed on CPU.
    SessionConfig cpu_config = config;
    cpu_config.placement = Placement::kCpu;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> backend,
                         CreateBackend(BackendKind::kCpu));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<SessionState> reference,
                         backend->CreateSession(cpu_config, SessionLimits{}));
    ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                         CreateSession(stub_.get(), ToWireConfig(config)));
    EXPECT_EQ(created.session().stats().placement(), v1::PLACEMENT_GPU);
    DecodeStream stream(stub_.get());
    ASSERT_OK(stream.Attach(created.session_id()));
    WireStepSource source(config.shape, 23, created.session_id(), 16);
    for (int t = 0; t < 100; ++t) {
      const v1::SessionStep step = source.Next();
      CoreStep core_step = ToCoreStep(step);
      StepResult expected;
      ASSERT_OK(reference->Step(core_step.input, &expected));
      ASSERT_OK_AND_ASSIGN(v1::SessionStepResult got, stream.Step(step));
      ASSERT_THAT(got.evicted(), ElementsAreArray(expected.evicted))
          << "step " << t;
      ASSERT_EQ(got.budget(), expected.budget);
    }
  }
}

}  // namespace
}  // namespace entrokv::server::testing
