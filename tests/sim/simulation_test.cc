#include "simulation.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace entrokv::sim {
namespace {

RunOptions SmallRun() {
  RunOptions o;
  o.stream.shape = {.layers = 1,
                    .kv_heads = 1,
                    .q_heads = 2,
                    .head_dim = 16,
                    .element_type = ElementType::kF32};
  o.session.shape = o.stream.shape;
  o.session.budget = 40;
  o.session.protection = {.sinks = 2, .recent = 4};
  o.steps = 300;
  return o;
}

TEST(SimulationTest, SameSeedGivesSameEvictionsAndErrors) {
  const RunOptions o = SmallRun();
  absl::StatusOr<RunResult> a = sim::Run(o);
  absl::StatusOr<RunResult> b = sim::Run(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->evicted, b->evicted);
  EXPECT_EQ(a->memory_error, b->memory_error);
}

TEST(SimulationTest, FixedBudgetHoldsLiveAtBudgetOnceFull) {
  RunOptions o = SmallRun();
  o.session.budget_control = BudgetControl::kFixed;
  absl::StatusOr<RunResult> r = sim::Run(o);
  ASSERT_TRUE(r.ok());
  // Live grows 1..40 over the first 40 steps, then stays at 40.
  const double expected = (40.0 * 41.0 / 2.0 + 40.0 * (300 - 40)) / 300.0;
  EXPECT_NEAR(r->mean_live, expected, 1e-9);
  EXPECT_EQ(r->peak_live, 40);
  EXPECT_EQ(r->evicted.size(), 300u - 40u);
}

TEST(SimulationTest, AuditStatisticsMatchTheSeries) {
  absl::StatusOr<RunResult> r = sim::Run(SmallRun());
  ASSERT_TRUE(r.ok());
  const Audit audit = MakeAudit(*r);
  double sum = 0.0, lo = INFINITY, hi = -INFINITY;
  for (double e : r->memory_error) {
    sum += e;
    lo = std::min(lo, e);
    hi = std::max(hi, e);
  }
  const double mean = sum / r->memory_error.size();
  double ss = 0.0;
  for (double e : r->memory_error) ss += (e - mean) * (e - mean);
  EXPECT_NEAR(audit.error.mean, mean, 1e-12);
  EXPECT_NEAR(audit.error.variance, ss / (r->memory_error.size() - 1), 1e-12);
  EXPECT_EQ(audit.error.min, lo);
  EXPECT_EQ(audit.error.max, hi);
  // The first-order term never exceeds the exact error (it is the exact error
  // times the recall, row by row).
  EXPECT_LE(audit.analytical_mean, audit.error.mean + 1e-12);
}

TEST(SimulationTest, CompareMatchesMeanLiveWithinOnePercent) {
  // One unit of nominal budget moves the mean live count by about
  // (steps − budget) / steps = 2/3 here, inside the ±1 (1%) tolerance.
  RunOptions o = SmallRun();
  absl::StatusOr<std::vector<ComparisonRow>> rows = Compare(o, 100.0);
  ASSERT_TRUE(rows.ok()) << rows.status();
  // 11 rankings x fixed, entropy (threshold is left out) + the other
  // affinity rule at both.
  EXPECT_EQ(rows->size(), 11u * 2u + 2u);
  for (const ComparisonRow& row : *rows) {
    EXPECT_NEAR(row.mean_live, 100.0, 1.0) << row.policy;
    EXPECT_TRUE(row.matched) << row.policy;
  }
}

// Two layers, 2 kv heads of a GQA group of 2, head_dim 16: room for a
// sketch, group-sum queries and a layer subset.
RunOptions GqaRun() {
  RunOptions o = SmallRun();
  o.stream.shape = {.layers = 2,
                    .kv_heads = 2,
                    .q_heads = 4,
                    .head_dim = 16,
                    .element_type = ElementType::kF32};
  o.session.shape = o.stream.shape;
  return o;
}

TEST(SimulationTest, WindowIgnoresTheSketchAndTheErrorReadsFullVectors) {
  // Window ranks by age alone, so the sketched session keeps the same
  // entries; the memory error, measured on the stream's full vectors, must
  // then be the same to the bit.
  RunOptions exact = GqaRun();
  ASSERT_TRUE(ApplyPolicyName("window", &exact.session).ok());
  RunOptions cheap = exact;
  cheap.session.shape.sketch_dim = 2;
  cheap.session.shape.query_form = QueryForm::kGroupSum;
  cheap.session.scored_layers = {1};
  EXPECT_EQ(SessionFor(cheap).shape.layers, 1);
  EXPECT_EQ(SessionFor(cheap).shape.key_elements(), 1 * 2 * 2);
  absl::StatusOr<RunResult> a = sim::Run(exact);
  absl::StatusOr<RunResult> b = sim::Run(cheap);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->evicted, b->evicted);
  EXPECT_EQ(a->memory_error, b->memory_error);
}

TEST(SimulationTest, SketchedAffinityEvictsOtherEntries) {
  RunOptions exact = GqaRun();
  ASSERT_TRUE(ApplyPolicyName("affinity", &exact.session).ok());
  RunOptions cheap = exact;
  cheap.session.shape.sketch_dim = 2;
  absl::StatusOr<RunResult> a = sim::Run(exact);
  absl::StatusOr<RunResult> b = sim::Run(cheap);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->evicted.size(), b->evicted.size());
  EXPECT_NE(a->evicted, b->evicted);
}

TEST(SimulationTest, CadenceLetsLiveGrowBetweenDecisions) {
  // Fixed budget 40, a decision on every 4th step (steps 3, 7, 11, ...):
  // live after a decision is min(entries, 40), then grows by one a step.
  RunOptions o = SmallRun();
  o.session.budget_control = BudgetControl::kFixed;
  o.session.decide_every = 4;
  absl::StatusOr<RunResult> r = sim::Run(o);
  ASSERT_TRUE(r.ok()) << r.status();
  double sum = 0.0;
  int64_t live = 0, peak = 0;
  for (int64_t t = 0; t < o.steps; ++t) {
    ++live;
    if ((t + 1) % 4 == 0) live = std::min<int64_t>(live, 40);
    sum += static_cast<double>(live);
    peak = std::max(peak, live);
  }
  EXPECT_NEAR(r->mean_live, sum / o.steps, 1e-9);
  EXPECT_EQ(r->peak_live, peak);
  EXPECT_EQ(r->peak_live, 43);
  // Evictions happen on decision steps only.
  for (int64_t step : r->evicted_step) EXPECT_EQ((step + 1) % 4, 0) << step;
}

TEST(SimulationTest, CalibrateBracketsTheTargetWithAdjacentBudgets) {
  RunOptions o = SmallRun();  // affinity+entropy.
  absl::StatusOr<Calibration> c = Calibrate(o, 55.0);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->found);
  EXPECT_EQ(c->hi_budget, c->lo_budget + 1);
  EXPECT_LE(c->lo.mean_live, 55.0);
  EXPECT_GT(c->hi.mean_live, 55.0);
  const double w =
      (55.0 - c->lo.mean_live) / (c->hi.mean_live - c->lo.mean_live);
  const double lo = Summarize(c->lo.memory_error).mean;
  const double hi = Summarize(c->hi.memory_error).mean;
  EXPECT_NEAR(c->mean_error, lo + w * (hi - lo), 1e-12);
  // Out of reach: more than every entry ever appended.
  absl::StatusOr<Calibration> none = Calibrate(o, 1e6);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->found);
}

TEST(SimulationTest, FidelityOfAnOrderOnlyRankingIsExact) {
  RunOptions o = GqaRun();
  ASSERT_TRUE(ApplyPolicyName("window", &o.session).ok());
  o.session.shape.sketch_dim = 2;
  absl::StatusOr<FidelityRow> row = MeasureFidelity(o, 60.0);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->variant, "project:2");
  EXPECT_EQ(row->diff_pct, 0.0);
  EXPECT_EQ(row->evicted_jaccard, 1.0);
  EXPECT_EQ(row->live_jaccard, 1.0);

  ASSERT_TRUE(ApplyPolicyName("affinity", &o.session).ok());
  row = MeasureFidelity(o, 60.0);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_LT(row->live_jaccard, 1.0);
  EXPECT_GT(row->live_jaccard, 0.0);
}

TEST(SimulationTest, ScaledRatesSpanTheSameStepsAtACadence) {
  SessionConfig config;
  config.decide_every = 4;
  ScaleRatesWithCadence(&config);
  EXPECT_NEAR(config.affinity.lambda, 0.9 * 0.9 * 0.9 * 0.9, 1e-15);
  EXPECT_NEAR(config.entropy_budget.ema_rate, 1.0 - 0.95 * 0.95 * 0.95 * 0.95,
              1e-15);
  SessionConfig every_step;
  ScaleRatesWithCadence(&every_step);
  EXPECT_EQ(every_step.affinity.lambda, 0.9);
  EXPECT_EQ(every_step.entropy_budget.ema_rate, 0.05);
}

TEST(SimulationTest, CompareLeavesPerHeadRankingsOutUnderGroupSum) {
  RunOptions o = GqaRun();
  o.steps = 120;
  o.session.shape.query_form = QueryForm::kGroupSum;
  absl::StatusOr<std::vector<ComparisonRow>> rows = Compare(o, 30.0);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 6u * 2u + 2u);  // No tova, h2o, expected, birth.
  for (const ComparisonRow& row : *rows) {
    EXPECT_EQ(row.policy.find("tova"), std::string::npos);
    EXPECT_EQ(row.policy.find("h2o"), std::string::npos);
  }
}

}  // namespace
}  // namespace entrokv::sim
