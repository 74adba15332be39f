// Corners of the contract where the answer's fields are easy to get wrong
// (docs/step-semantics.md §10, §11; the proto's SessionStats, SessionStepResult
// and SessionConfig.scored_layers comments). Expected values are computed here
// from the documented formulas.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::testing::ElementsAre;

// A one-layer f32 session of `budget` with the given block size (block
// summaries on when it is above 1) and cadence.
v1::SessionConfig Config(int64_t budget, int32_t block_size,
                         int32_t decide_every) {
  v1::SessionConfig c;
  c.mutable_shape()->set_layers(1);
  c.mutable_shape()->set_head_dim(4);
  c.mutable_shape()->set_element_type(v1::ELEMENT_TYPE_F32);
  c.set_budget(budget);
  c.set_policy("entropy");
  c.set_placement(v1::PLACEMENT_CPU);
  c.set_block_size(block_size);
  c.set_block_summary(block_size > 1);
  c.set_decide_every(decide_every);
  return c;
}

// A step appending one entry (key and query all 0.5) at `slot`.
v1::SessionStep OneEntry(const std::string& id, uint64_t step, uint64_t slot) {
  v1::SessionStep s;
  s.set_session_id(id);
  s.set_step(step);
  s.mutable_append()->add_slot_ids(slot);
  const std::vector<float> half(4, 0.5f);
  s.mutable_append()->set_keys(std::string(
      reinterpret_cast<const char*>(half.data()), half.size() * sizeof(float)));
  s.set_queries(s.append().keys());
  return s;
}

class ContractTest : public ServerTest {
 protected:
  void SetUp() override { StartServer(); }
};

// §10: with block summaries the budget counts whole blocks, B_blocks =
// max(1, floor(B / N)), reported in tokens as B_blocks · N; before the first
// decision that is what CreateSession's stats and a deferred step report.
TEST_F(ContractTest, BudgetBeforeTheFirstDecisionWithBlockSummaries) {
  constexpr int64_t kBudget = 63;
  constexpr int32_t kBlock = 5;
  const int64_t expected = std::max<int64_t>(1, kBudget / kBlock) * kBlock;
  ASSERT_EQ(expected, 60);
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), Config(kBudget, kBlock, 4)));
  EXPECT_EQ(created.session().stats().budget(), expected);
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(created.session_id()));
  v1::SessionStep step = OneEntry(created.session_id(), 0, 1);
  step.set_entropy(1.0);
  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult deferred, stream.Step(step));
  EXPECT_TRUE(deferred.deferred());
  EXPECT_EQ(deferred.budget(), expected);
  // Token granularity: the configured budget itself.
  ASSERT_OK_AND_ASSIGN(created,
                       CreateSession(stub_.get(), Config(kBudget, 1, 4)));
  EXPECT_EQ(created.session().stats().budget(), kBudget);
}

// §11: a deferred step reports the given entropy, or the entropy of its
// logits (natural log), or 0 when it carries neither.
TEST_F(ContractTest, EntropyOfADeferredStep) {
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), Config(64, 1, 8)));
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(created.session_id()));
  const std::string& id = created.session_id();

  const std::vector<double> logits = {2.0, -1.0, 0.5, 3.25, 0.0};
  double z = 0;
  for (double l : logits) z += std::exp(l);
  double h = 0;
  for (double l : logits) h -= std::exp(l) / z * (l - std::log(z));
  v1::SessionStep with_logits = OneEntry(id, 0, 1);
  for (double l : logits) {
    with_logits.mutable_logits()->add_values(static_cast<float>(l));
  }
  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult a, stream.Step(with_logits));
  EXPECT_TRUE(a.deferred());
  EXPECT_NEAR(a.entropy(), h, 1e-5);

  v1::SessionStep with_entropy = OneEntry(id, 1, 2);
  with_entropy.set_entropy(0.75);
  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult b, stream.Step(with_entropy));
  EXPECT_TRUE(b.deferred());
  EXPECT_EQ(b.entropy(), 0.75);

  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult c,
                       stream.Step(OneEntry(id, 2, 3)));
  EXPECT_TRUE(c.deferred());
  EXPECT_EQ(c.entropy(), 0.0);
}

// SessionConfig.scored_layers: unset, the effective config lists the layers
// in force, 0 .. shape.layers-1; set, as given.
TEST_F(ContractTest, EffectiveScoredLayersSayWhatIsInForce) {
  v1::SessionConfig config = Config(64, 1, 1);
  config.mutable_shape()->set_layers(3);
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), config));
  EXPECT_THAT(created.session().config().scored_layers(), ElementsAre(0, 1, 2));
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info,
                       GetSession(stub_.get(), created.session_id()));
  EXPECT_THAT(info.config().scored_layers(), ElementsAre(0, 1, 2));

  config.add_scored_layers(4);
  config.add_scored_layers(12);
  config.add_scored_layers(20);
  ASSERT_OK_AND_ASSIGN(created, CreateSession(stub_.get(), config));
  EXPECT_THAT(created.session().config().scored_layers(),
              ElementsAre(4, 12, 20));
}

}  // namespace
}  // namespace entrokv::server::testing
