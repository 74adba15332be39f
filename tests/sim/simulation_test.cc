#include "simulation.h"

#include <cmath>

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
  EXPECT_EQ(rows->size(), 7u * 2u + 2u);  // + the other affinity rule.
  for (const ComparisonRow& row : *rows) {
    EXPECT_NEAR(row.mean_live, 100.0, 1.0) << row.policy;
    EXPECT_TRUE(row.matched) << row.policy;
  }
}

}  // namespace
}  // namespace entrokv::sim
