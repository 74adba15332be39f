// Session configuration: validation names the bad field; policy names parse
// into a ranking and a budget controller.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::testing::HasSubstr;

// One bad configuration: how to break a valid one, and the field it names.
struct BadField {
  std::string field;
  std::function<void(SessionConfig&)> corrupt;
};

std::vector<BadField> BadFields() {
  return {
      {"shape.layers", [](SessionConfig& c) { c.shape.layers = 0; }},
      {"shape.layers", [](SessionConfig& c) { c.shape.layers = -1; }},
      {"shape.kv_heads", [](SessionConfig& c) { c.shape.kv_heads = 0; }},
      {"shape.q_heads", [](SessionConfig& c) { c.shape.q_heads = 0; }},
      {"shape.q_heads",
       [](SessionConfig& c) {
         c.shape.kv_heads = 4;
         c.shape.q_heads = 6;
       }},
      {"shape.q_heads",
       [](SessionConfig& c) {
         c.shape.kv_heads = 4;
         c.shape.q_heads = 2;
       }},
      {"shape.head_dim", [](SessionConfig& c) { c.shape.head_dim = 0; }},
      {"shape.element_type",
       [](SessionConfig& c) {
         c.shape.element_type = static_cast<ElementType>(9);
       }},
      {"budget", [](SessionConfig& c) { c.budget = 0; }},
      {"budget", [](SessionConfig& c) { c.budget = -5; }},
      {"ranking",
       [](SessionConfig& c) { c.ranking = static_cast<Ranking>(42); }},
      {"budget_control",
       [](SessionConfig& c) {
         c.budget_control = static_cast<BudgetControl>(42);
       }},
      {"affinity.lambda", [](SessionConfig& c) { c.affinity.lambda = 1.5; }},
      {"affinity.lambda", [](SessionConfig& c) { c.affinity.lambda = -0.1; }},
      {"entropy_budget.gamma",
       [](SessionConfig& c) { c.entropy_budget.gamma = 1.0; }},
      {"entropy_budget.gamma",
       [](SessionConfig& c) { c.entropy_budget.gamma = -0.2; }},
      {"entropy_budget.ema_rate",
       [](SessionConfig& c) { c.entropy_budget.ema_rate = 0.0; }},
      {"entropy_budget.ema_rate",
       [](SessionConfig& c) { c.entropy_budget.ema_rate = 1.01; }},
      {"entropy_budget.epsilon",
       [](SessionConfig& c) { c.entropy_budget.epsilon = 0.0; }},
      {"entropy_budget.min_budget",
       [](SessionConfig& c) { c.entropy_budget.min_budget = -1; }},
      {"entropy_budget.max_budget",
       [](SessionConfig& c) { c.entropy_budget.max_budget = -1; }},
      {"h2o.recent_fraction",
       [](SessionConfig& c) { c.h2o.recent_fraction = 1.5; }},
      {"h2o.recent_fraction",
       [](SessionConfig& c) { c.h2o.recent_fraction = -0.5; }},
      {"streaming_sinks", [](SessionConfig& c) { c.streaming_sinks = -1; }},
      {"protection.sinks", [](SessionConfig& c) { c.protection.sinks = -1; }},
      {"protection.recent",
       [](SessionConfig& c) { c.protection.recent = -1; }},
      {"block_size", [](SessionConfig& c) { c.block_size = 0; }},
      {"block_size", [](SessionConfig& c) { c.block_size = -16; }},
  };
}

TEST(SessionConfigTest, DefaultsAreValid) {
  EXPECT_OK(ValidateSessionConfig(SessionConfig{}));
}

TEST(SessionConfigTest, GqaAndMqaShapesAreValid) {
  SessionConfig config;
  config.shape.kv_heads = 2;
  config.shape.q_heads = 8;
  EXPECT_OK(ValidateSessionConfig(config));
  config.shape.kv_heads = 1;
  config.shape.q_heads = 32;
  EXPECT_OK(ValidateSessionConfig(config));
}

TEST(SessionConfigTest, EveryBadFieldIsNamed) {
  for (const BadField& bad : BadFields()) {
    SCOPED_TRACE(bad.field);
    SessionConfig config;
    bad.corrupt(config);
    const absl::Status status = ValidateSessionConfig(config);
    EXPECT_STATUS_CODE(status, absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(bad.field));
  }
}

TEST(SessionConfigTest, MinBudgetAboveMaxBudgetIsRejected) {
  SessionConfig config;
  config.entropy_budget.min_budget = 300;
  config.entropy_budget.max_budget = 200;
  const absl::Status status = ValidateSessionConfig(config);
  EXPECT_STATUS_CODE(status, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("entropy_budget."));
}

// max_budget and hard_ceiling are 0 or in [budget, 2^40] (the proto's
// "Bound: 0 or [budget, 2^40]."): the message gives that range on either
// side of it, not "below budget" for a value above 2^40.
TEST(SessionConfigTest, CeilingsOutsideTheirRangeSayWhichRange) {
  constexpr int64_t kTwoTo40 = int64_t{1} << 40;
  for (const int64_t v : {int64_t{99}, kTwoTo40 + 1}) {
    SessionConfig config;
    config.budget = 100;
    config.entropy_budget.max_budget = v;
    EXPECT_THAT(
        std::string(ValidateSessionConfig(config).message()),
        ::testing::StartsWith(absl::StrCat("entropy_budget.max_budget: ", v,
                                           " is outside [budget 100, 2^40]")));
    config = SessionConfig{};
    config.budget = 100;
    config.hard_ceiling = v;
    EXPECT_THAT(std::string(ValidateSessionConfig(config).message()),
                ::testing::StartsWith(absl::StrCat(
                    "hard_ceiling: ", v, " is outside [budget 100, 2^40]")));
  }
}

TEST(SessionConfigTest, BackendRefusesAnInvalidConfigNamingTheField) {
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_OK(backend);
  SessionConfig config;
  config.shape.kv_heads = 4;
  config.shape.q_heads = 6;
  auto session = (*backend)->CreateSession(config, {});
  EXPECT_STATUS_CODE(session, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(session.status().message()),
              HasSubstr("shape.q_heads"));
}

TEST(PolicyNameTest, EntropyIsAffinityRankingWithEntropyBudget) {
  SessionConfig config;
  config.ranking = Ranking::kWindow;
  config.budget_control = BudgetControl::kFixed;
  ASSERT_OK(ApplyPolicyName("entropy", &config));
  EXPECT_EQ(config.ranking, Ranking::kAffinity);
  EXPECT_EQ(config.budget_control, BudgetControl::kEntropy);
  EXPECT_EQ(PolicyName(config), "affinity+entropy");
}

TEST(PolicyNameTest, ARankingAloneHasAFixedBudget) {
  SessionConfig config;  // Defaults to affinity + entropy.
  ASSERT_OK(ApplyPolicyName("h2o", &config));
  EXPECT_EQ(config.ranking, Ranking::kH2o);
  EXPECT_EQ(config.budget_control, BudgetControl::kFixed);
}

TEST(PolicyNameTest, RankingPlusControlComposes) {
  SessionConfig config;
  ASSERT_OK(ApplyPolicyName("h2o+entropy", &config));
  EXPECT_EQ(config.ranking, Ranking::kH2o);
  EXPECT_EQ(config.budget_control, BudgetControl::kEntropy);
  ASSERT_OK(ApplyPolicyName("affinity+fixed", &config));
  EXPECT_EQ(config.ranking, Ranking::kAffinity);
  EXPECT_EQ(config.budget_control, BudgetControl::kFixed);
}

TEST(PolicyNameTest, EveryPairingRoundTripsThroughItsName) {
  for (Ranking ranking : kAllRankings) {
    for (BudgetControl control : kAllBudgetControls) {
      SessionConfig config;
      config.ranking = ranking;
      config.budget_control = control;
      const std::string name = PolicyName(config);
      EXPECT_EQ(name, std::string(RankingName(ranking)) + "+" +
                          std::string(BudgetControlName(control)));
      SessionConfig parsed;
      ASSERT_OK(ApplyPolicyName(name, &parsed));
      EXPECT_EQ(parsed.ranking, ranking) << name;
      EXPECT_EQ(parsed.budget_control, control) << name;
    }
  }
}

TEST(PolicyNameTest, BadNamesAreRejected) {
  for (std::string_view bad :
       {"", "lru", "h2o+", "+entropy", "h2o+entropy+fixed", "h2o+lru",
        "entropy+entropy", "h2o entropy", "affinity+"}) {
    SessionConfig config;
    const absl::Status status = ApplyPolicyName(bad, &config);
    EXPECT_STATUS_CODE(status, absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(PolicyNameTest, NamesOfEveryEnumParseBack) {
  const std::vector<std::pair<Ranking, std::string_view>> rankings = {
      {Ranking::kWindow, "window"},     {Ranking::kStreaming, "streaming"},
      {Ranking::kH2o, "h2o"},           {Ranking::kTova, "tova"},
      {Ranking::kKeyNorm, "keynorm"},   {Ranking::kRandom, "random"},
      {Ranking::kAffinity, "affinity"}};
  for (const auto& [ranking, name] : rankings) {
    EXPECT_EQ(RankingName(ranking), name);
    Ranking parsed = Ranking::kWindow;
    EXPECT_TRUE(ParseRanking(name, &parsed)) << name;
    EXPECT_EQ(parsed, ranking);
  }
  BudgetControl control;
  EXPECT_TRUE(ParseBudgetControl("fixed", &control));
  EXPECT_EQ(control, BudgetControl::kFixed);
  EXPECT_TRUE(ParseBudgetControl("entropy", &control));
  EXPECT_EQ(control, BudgetControl::kEntropy);
  AffinityUpdate update;
  EXPECT_TRUE(ParseAffinityUpdate("seed", &update));
  EXPECT_EQ(update, AffinityUpdate::kSeed);
  EXPECT_TRUE(ParseAffinityUpdate("logit_ema", &update));
  EXPECT_EQ(update, AffinityUpdate::kLogitEma);
  Placement placement;
  for (Placement p : {Placement::kCpu, Placement::kGpu, Placement::kAuto}) {
    EXPECT_TRUE(ParsePlacement(PlacementName(p), &placement));
    EXPECT_EQ(placement, p);
  }
  Ranking ranking;
  EXPECT_FALSE(ParseRanking("lru", &ranking));
  EXPECT_FALSE(ParseBudgetControl("adaptive", &control));
  EXPECT_FALSE(ParseAffinityUpdate("ema", &update));
  EXPECT_FALSE(ParsePlacement("tpu", &placement));
}

TEST(PolicyNeedsEntropyTest, AffinityOrBirthRankingOrEntropyBudgetReadIt) {
  SessionConfig config;
  for (Ranking ranking : kAllRankings) {
    for (BudgetControl control : kAllBudgetControls) {
      config.ranking = ranking;
      config.budget_control = control;
      EXPECT_EQ(PolicyNeedsEntropy(config),
                ranking == Ranking::kAffinity || ranking == Ranking::kBirth ||
                    control == BudgetControl::kEntropy)
          << PolicyName(config);
    }
  }
}

}  // namespace
}  // namespace entrokv
