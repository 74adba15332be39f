// Recovery for a policy whose steps carry less than the others': a keydiff
// session, whose decisions read no query, may send its steps without
// queries, and must still come back once the server answers again
// (session.h: with a live_keys callback a degraded session comes back by
// itself).

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client_test_util.h"
#include "entrokv/client/session.h"
#include "gtest/gtest.h"
#include "recovery_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::MakeStory;
using ::entrokv::testing::SmallConfig;
using ::entrokv::testing::StoryStep;
using recovery_testing::Engine;

class RecoveryPolicyTest : public recovery_testing::RecoveryTest {};

TEST_P(RecoveryPolicyTest, AKeydiffSessionSendingNoQueriesRecovers) {
  const SessionConfig config = SmallConfig("keydiff", 6, ElementType::kF32);
  const std::vector<StoryStep> story = MakeStory(config.shape, 4, 4);
  Engine engine(story);
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(config, Options(&engine)));
  const auto without_queries = [&engine](size_t t) {
    StepRequest request = engine.Request(t);
    request.queries = VectorView();
    return request;
  };

  // The server goes silent: the prefill misses its deadline and degrades
  // the session.
  service_.swallow_steps = true;
  ASSERT_OK_AND_ASSIGN(StepOutcome prefill, session->Step(without_queries(0)));
  EXPECT_TRUE(prefill.fallback);
  ASSERT_TRUE(session->degraded());

  // It answers again; after recovery_interval the next step, still without
  // queries, brings the session back on a new server session.
  service_.swallow_steps = false;
  absl::SleepFor(absl::Milliseconds(120));
  ASSERT_OK_AND_ASSIGN(StepOutcome back, session->Step(without_queries(1)));
  EXPECT_FALSE(back.fallback);
  EXPECT_FALSE(session->degraded()) << session->degraded_reason();
  EXPECT_EQ(session->id(), "s2");
  EXPECT_EQ(session->counters().recovery_attempts, 1);
  EXPECT_EQ(session->counters().recoveries, 1);
  EXPECT_EQ(engine.calls(), 1);
  EXPECT_OK(session->Close());
}

INSTANTIATE_TEST_SUITE_P(BothStreamApis, RecoveryPolicyTest,
                         testing::BothStreamApis(), testing::StreamApiName);

}  // namespace
}  // namespace entrokv
