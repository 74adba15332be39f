// entrokv-sim: reruns the original experiment on a synthetic reasoning stream.
//
//   entrokv-sim              the audit of one run of the `entropy` policy, then
//                            the multi-seed sanity check (exit 1 if it fails)
//   entrokv-sim --compare    every ranking x budget controller at equal mean
//                            live entries, as a table
//   entrokv-sim --fidelity   a cheaper-scoring variant (--sketch,
//                            --query_form, --scored_layers, --decide_every,
//                            --block_summary) against the same policies
//                            scored exactly, at equal mean live entries
//   --json                   machine-readable output instead

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "entrokv/core/config.h"
#include "needles.h"
#include "simulation.h"

ABSL_FLAG(int64_t, steps, 1000, "Decode steps per run.");
ABSL_FLAG(std::string, policy, "entropy",
          "Policy of the audit run: RANKING[+fixed|+entropy|+threshold] or "
          "entropy.");
ABSL_FLAG(std::string, affinity_update, "logit_ema",
          "Affinity update rule: seed or logit_ema.");
ABSL_FLAG(double, beta, 1.0, "Affinity beta.");
ABSL_FLAG(double, lambda, 0.9, "Affinity lambda (logit_ema).");
ABSL_FLAG(double, gamma, 0.5, "Entropy budget gamma.");
ABSL_FLAG(int64_t, budget, 128, "Nominal budget of the audit run (entries).");
ABSL_FLAG(double, target_live, 0,
          "--compare: the mean live entries every policy is calibrated to "
          "(0: the audit policy's mean live at --budget).");
ABSL_FLAG(int64_t, sinks, 4, "Protected first entries.");
ABSL_FLAG(int64_t, recent, 8, "Protected most recent entries.");
ABSL_FLAG(uint64_t, seed, 1, "Stream seed of the audit run.");
ABSL_FLAG(int32_t, sanity_seeds, 5,
          "Seeds of the sanity check (seed..seed+n-1).");
ABSL_FLAG(int32_t, layers, 2, "Layers.");
ABSL_FLAG(int32_t, kv_heads, 2, "KV heads.");
ABSL_FLAG(int32_t, q_heads, 4, "Query heads.");
ABSL_FLAG(int32_t, head_dim, 32, "Head dimension.");
ABSL_FLAG(std::string, element_type, "f32", "f32, f16 or bf16.");
ABSL_FLAG(bool, compare, false,
          "Compare every policy at equal mean live entries.");
ABSL_FLAG(bool, json, false, "Print JSON instead of text.");
ABSL_FLAG(bool, needles, false,
          "Needle retention: every ranking at --budget (fixed, and entropy "
          "with max_budget = --budget, so the peak is equal) over --steps "
          "entries with --needle_count needles asked after "
          "[--needle_min_gap, --needle_max_gap] steps (docs/simulator.md).");
ABSL_FLAG(int32_t, needle_count, 64, "--needles: needles planted.");
ABSL_FLAG(int64_t, needle_min_gap, 256, "--needles: shortest gap, steps.");
ABSL_FLAG(int64_t, needle_max_gap, 8192, "--needles: longest gap, steps.");
ABSL_FLAG(std::string, sketch, "exact",
          "Variant: keys and queries as sent to core: exact or project:R.");
ABSL_FLAG(std::string, query_form, "per_head",
          "Variant: per_head or group_sum (one summed query per kv head; not "
          "for tova or h2o, which --compare and --fidelity then leave out).");
ABSL_FLAG(std::string, scored_layers, "all",
          "Variant: the stream's layers sent to core: 'all' or a comma list.");
ABSL_FLAG(int32_t, decide_every, 1, "Variant: decide on every K-th step.");
ABSL_FLAG(int32_t, block_size, 1, "Block granularity: N tokens (1: token).");
ABSL_FLAG(bool, block_summary, false,
          "Variant: with --block_size >= 2, one state per block (mean key).");
ABSL_FLAG(bool, cadence_scaled_rates, false,
          "--fidelity: with --decide_every K > 1, the variant's affinity "
          "lambda becomes lambda^K and its entropy EMA rate 1 - (1 - r)^K, "
          "so that its state spans as many steps as the exact run's.");
ABSL_FLAG(bool, fidelity, false,
          "Measure the variant against the same policies scored exactly at "
          "mean live --target_live (0: the exact audit policy's mean live at "
          "--budget).");
ABSL_FLAG(std::string, fidelity_policies,
          "affinity+fixed,entropy,window,h2o,tova",
          "--fidelity: the policies measured.");

namespace entrokv::sim {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "entrokv-sim: %s\n", status.ToString().c_str());
  return 2;
}

absl::StatusOr<RunOptions> OptionsFromFlags() {
  RunOptions o;
  Shape& shape = o.stream.shape;
  shape.layers = absl::GetFlag(FLAGS_layers);
  shape.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  shape.q_heads = absl::GetFlag(FLAGS_q_heads);
  shape.head_dim = absl::GetFlag(FLAGS_head_dim);
  if (!ParseElementType(absl::GetFlag(FLAGS_element_type),
                        &shape.element_type)) {
    return absl::InvalidArgumentError("--element_type: want f32, f16 or bf16");
  }
  o.stream.seed = absl::GetFlag(FLAGS_seed);
  o.steps = absl::GetFlag(FLAGS_steps);
  if (o.steps < 1) return absl::InvalidArgumentError("--steps: must be >= 1");
  SessionConfig& c = o.session;
  c.shape = shape;
  c.budget = absl::GetFlag(FLAGS_budget);
  c.seed = o.stream.seed;
  c.protection.sinks = absl::GetFlag(FLAGS_sinks);
  c.protection.recent = absl::GetFlag(FLAGS_recent);
  c.affinity.beta = absl::GetFlag(FLAGS_beta);
  c.affinity.lambda = absl::GetFlag(FLAGS_lambda);
  c.entropy_budget.gamma = absl::GetFlag(FLAGS_gamma);
  if (!ParseAffinityUpdate(absl::GetFlag(FLAGS_affinity_update),
                           &c.affinity.update)) {
    return absl::InvalidArgumentError(
        "--affinity_update: want seed or logit_ema");
  }
  if (absl::Status st = ApplyPolicyName(absl::GetFlag(FLAGS_policy), &c);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = ApplySketchName(absl::GetFlag(FLAGS_sketch), &c.shape);
      !st.ok()) {
    return st;
  }
  if (!ParseQueryForm(absl::GetFlag(FLAGS_query_form), &c.shape.query_form)) {
    return absl::InvalidArgumentError(
        "--query_form: want per_head or group_sum");
  }
  absl::StatusOr<std::vector<int32_t>> layers =
      ParseScoredLayers(absl::GetFlag(FLAGS_scored_layers), shape.layers);
  if (!layers.ok()) return layers.status();
  c.scored_layers = *std::move(layers);
  c.decide_every = absl::GetFlag(FLAGS_decide_every);
  c.block_size = absl::GetFlag(FLAGS_block_size);
  c.block_summary = absl::GetFlag(FLAGS_block_summary);
  if (absl::Status st = ValidateSessionConfig(SessionFor(o)); !st.ok()) {
    return st;
  }
  return o;
}

int RunAudit(const RunOptions& o, bool json) {
  absl::StatusOr<RunResult> run = Run(o);
  if (!run.ok()) return Fail(run.status());
  const Audit audit = MakeAudit(*run);
  std::vector<uint64_t> seeds;
  for (int32_t i = 0; i < absl::GetFlag(FLAGS_sanity_seeds); ++i) {
    seeds.push_back(o.stream.seed + static_cast<uint64_t>(i));
  }
  absl::StatusOr<SanityCheck> check = RunSanityCheck(o, seeds);
  if (!check.ok()) return Fail(check.status());
  if (json) {
    std::string means, ses;
    for (size_t k = 0; k < seeds.size(); ++k) {
      absl::StrAppendFormat(&means, "%s%.9g", k ? "," : "", check->means[k]);
      absl::StrAppendFormat(&ses, "%s%.9g", k ? "," : "",
                            check->standard_errors[k]);
    }
    std::printf(
        "{\"policy\":\"%s\",\"steps\":%lld,\"budget\":%lld,\"mean_live\":%.6g,"
        "\"peak_live\":%lld,\"memory_error\":{\"mean\":%.9g,\"variance\":%.9g,"
        "\"min\":%.9g,\"max\":%.9g,\"p95\":%.9g,\"lag1\":%.6g},"
        "\"analytical_mean\":%.9g,\"divergence\":%.6g,\"attention_recall\":%."
        "9g,"
        "\"sanity\":{\"means\":[%s],\"standard_errors\":[%s],\"chi_square\":%."
        "6g,"
        "\"dof\":%d,\"critical\":%.6g,\"passed\":%s}}\n",
        PolicyName(o.session).c_str(), static_cast<long long>(o.steps),
        static_cast<long long>(o.session.budget), run->mean_live,
        static_cast<long long>(run->peak_live), audit.error.mean,
        audit.error.variance, audit.error.min, audit.error.max, audit.error.p95,
        audit.error.lag1, audit.analytical_mean, audit.divergence,
        Summarize(run->recall).mean, means.c_str(), ses.c_str(),
        check->chi_square, check->degrees_of_freedom, check->critical,
        check->passed ? "true" : "false");
  } else {
    std::printf(
        "entrokv-sim: %lld steps, policy %s (affinity %s), budget %lld\n",
        static_cast<long long>(o.steps), PolicyName(o.session).c_str(),
        std::string(AffinityUpdateName(o.session.affinity.update)).c_str(),
        static_cast<long long>(o.session.budget));
    std::printf("  live entries       mean %.1f, peak %lld\n", run->mean_live,
                static_cast<long long>(run->peak_live));
    std::printf("memory error audit\n");
    std::printf("  empirical variance %.6g\n", audit.error.variance);
    std::printf("  min / max          %.6g / %.6g\n", audit.error.min,
                audit.error.max);
    std::printf("  mean               %.6g\n", audit.error.mean);
    std::printf(
        "  analytical mean    %.6g  (first order in the evicted attention "
        "mass)\n",
        audit.analytical_mean);
    std::printf("  divergence         %.2f%%\n", 100.0 * audit.divergence);
    std::printf("  attention recall   %.4f\n", Summarize(run->recall).mean);
    std::printf("sanity check over %zu seeds\n", seeds.size());
    for (size_t k = 0; k < seeds.size(); ++k) {
      std::printf("  seed %-4llu mean error %.6g +- %.2g\n",
                  static_cast<unsigned long long>(seeds[k]), check->means[k],
                  check->standard_errors[k]);
    }
    std::printf("  chi-square %.2f on %d dof, critical %.2f (p = 0.001): %s\n",
                check->chi_square, check->degrees_of_freedom, check->critical,
                check->passed
                    ? "PASS"
                    : "FAIL: seed means disagree beyond the per-step variance");
  }
  return check->passed ? 0 : 1;
}

int RunCompare(const RunOptions& o, bool json) {
  double target = absl::GetFlag(FLAGS_target_live);
  if (target <= 0) {
    RunOptions probe = o;
    probe.quality = false;
    absl::StatusOr<RunResult> r = Run(probe);
    if (!r.ok()) return Fail(r.status());
    target = r->mean_live;
  }
  absl::StatusOr<std::vector<ComparisonRow>> rows = Compare(o, target);
  if (!rows.ok()) return Fail(rows.status());
  if (json) {
    std::printf("{\"target_mean_live\":%.6g,\"steps\":%lld,\"rows\":[", target,
                static_cast<long long>(o.steps));
    for (size_t i = 0; i < rows->size(); ++i) {
      const ComparisonRow& r = (*rows)[i];
      std::printf(
          "%s{\"policy\":\"%s\",\"nominal_budget\":%lld,\"mean_error\":%.9g,"
          "\"p95_error\":%.9g,\"attention_recall\":%.9g,\"mean_live\":%.6g,"
          "\"peak_live\":%lld,\"matched\":%s}",
          i ? "," : "", r.policy.c_str(),
          static_cast<long long>(r.nominal_budget), r.mean_error, r.p95_error,
          r.recall, r.mean_live, static_cast<long long>(r.peak_live),
          r.matched ? "true" : "false");
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf(
      "entrokv-sim --compare: %lld steps, every policy at mean live %.1f "
      "(nominal budget calibrated by bisection)\n",
      static_cast<long long>(o.steps), target);
  std::printf("%-30s %7s %11s %11s %8s %10s %6s\n", "policy", "budget",
              "mean error", "p95 error", "recall", "mean live", "peak");
  for (const ComparisonRow& r : *rows) {
    std::printf("%-30s %7lld %11.5f %11.5f %8.4f %10.1f %6lld%s\n",
                r.policy.c_str(), static_cast<long long>(r.nominal_budget),
                r.mean_error, r.p95_error, r.recall, r.mean_live,
                static_cast<long long>(r.peak_live),
                r.matched ? "" : "  (mean live off by > 1%)");
  }
  return 0;
}

int RunNeedleTable(const RunOptions& o, bool json) {
  NeedleOptions n;
  n.stream = o.stream;
  n.entries = o.steps;
  n.needles = absl::GetFlag(FLAGS_needle_count);
  n.min_gap = absl::GetFlag(FLAGS_needle_min_gap);
  n.max_gap = absl::GetFlag(FLAGS_needle_max_gap);
  n.seed = o.stream.seed;
  std::vector<NeedleResult> rows;
  for (Ranking ranking : kAllRankings) {
    for (BudgetControl control : kAllBudgetControls) {
      // A threshold's tau is on its ranking's scale: not in the table.
      if (control == BudgetControl::kThreshold) continue;
      SessionConfig c = o.session;
      c.ranking = ranking;
      c.budget_control = control;
      // Equal peak: the entropy controller may only lower the budget.
      c.entropy_budget.max_budget = c.budget;
      absl::StatusOr<NeedleResult> r = RunNeedles(c, n);
      if (!r.ok()) return Fail(r.status());
      rows.push_back(*std::move(r));
    }
  }
  if (json) {
    std::printf("{\"needles\":[");
    for (size_t i = 0; i < rows.size(); ++i) {
      const NeedleResult& r = rows[i];
      std::printf(
          "%s{\"policy\":\"%s\",\"planted\":%lld,\"retained\":%lld,"
          "\"mean_live\":%.6g,\"peak_live\":%lld}",
          i ? "," : "", r.policy.c_str(), static_cast<long long>(r.planted),
          static_cast<long long>(r.retained), r.mean_live,
          static_cast<long long>(r.peak_live));
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf(
      "entrokv-sim --needles: %lld entries, budget %lld (peak equal), needles "
      "asked %lld-%lld steps later\n| policy | retained | share | mean live "
      "| peak live |\n|---|---:|---:|---:|---:|\n",
      static_cast<long long>(n.entries),
      static_cast<long long>(o.session.budget),
      static_cast<long long>(n.min_gap), static_cast<long long>(n.max_gap));
  for (const NeedleResult& r : rows) {
    std::printf("| %s | %lld / %lld | %.3f | %.1f | %lld |\n",
                r.policy.c_str(), static_cast<long long>(r.retained),
                static_cast<long long>(r.planted),
                r.planted > 0 ? static_cast<double>(r.retained) / r.planted
                              : 0.0,
                r.mean_live, static_cast<long long>(r.peak_live));
  }
  return 0;
}

int RunFidelity(const RunOptions& o, bool json) {
  double target = absl::GetFlag(FLAGS_target_live);
  if (target <= 0) {
    RunOptions probe = o;
    probe.session = ExactScoring(o.session);
    probe.quality = false;
    absl::StatusOr<RunResult> r = Run(probe);
    if (!r.ok()) return Fail(r.status());
    target = r->mean_live;
  }
  if (VariantName(ExactScoring(o.session)) == VariantName(o.session)) {
    return Fail(absl::InvalidArgumentError(
        "--fidelity: the variant flags name exact scoring; give --sketch, "
        "--query_form group_sum, --scored_layers, --decide_every or "
        "--block_summary"));
  }
  std::vector<FidelityRow> rows;
  for (absl::string_view name : absl::StrSplit(
           absl::GetFlag(FLAGS_fidelity_policies), ',', absl::SkipEmpty())) {
    RunOptions v = o;
    if (absl::Status st = ApplyPolicyName(std::string(name), &v.session);
        !st.ok()) {
      return Fail(st);
    }
    if (v.session.shape.query_form == QueryForm::kGroupSum &&
        RankingNeedsPerHeadQueries(v.session.ranking)) {
      std::fprintf(stderr,
                   "note: skipping %s: it needs per-head attention, which "
                   "group_sum queries do not give\n",
                   PolicyName(v.session).c_str());
      continue;
    }
    RunOptions exact = v;
    exact.session = ExactScoring(v.session);
    const bool scaled =
        absl::GetFlag(FLAGS_cadence_scaled_rates) && v.session.decide_every > 1;
    if (scaled) ScaleRatesWithCadence(&v.session);
    absl::StatusOr<FidelityRow> row = MeasureFidelity(exact, v, target);
    if (!row.ok()) return Fail(row.status());
    if (scaled) row->variant += " scaled-rates";
    rows.push_back(*std::move(row));
  }
  if (json) {
    std::printf("{\"target_mean_live\":%.6g,\"steps\":%lld,\"rows\":[", target,
                static_cast<long long>(o.steps));
    for (size_t i = 0; i < rows.size(); ++i) {
      const FidelityRow& r = rows[i];
      std::printf(
          "%s{\"policy\":\"%s\",\"variant\":\"%s\",\"found\":%s,"
          "\"exact\":{\"mean_error\":%.9g,\"recall\":%.6g,\"budgets\":[%lld,"
          "%lld],\"mean_live\":[%.6g,%.6g],\"peak_live\":%lld},"
          "\"variant_run\":{\"mean_error\":%.9g,\"recall\":%.6g,\"budgets\":"
          "[%lld,%lld],\"mean_live\":[%.6g,%.6g],\"peak_live\":%lld},"
          "\"diff_pct\":%.6g,\"diff_se_pct\":%.6g,\"same_budget\":%lld,"
          "\"evicted_jaccard\":%.6g,\"live_jaccard\":%.6g}",
          i ? "," : "", r.policy.c_str(), r.variant.c_str(),
          r.exact.found && r.cheap.found ? "true" : "false", r.exact.mean_error,
          r.exact.recall, static_cast<long long>(r.exact.lo_budget),
          static_cast<long long>(r.exact.hi_budget), r.exact.lo.mean_live,
          r.exact.hi.mean_live, static_cast<long long>(r.exact.hi.peak_live),
          r.cheap.mean_error, r.cheap.recall,
          static_cast<long long>(r.cheap.lo_budget),
          static_cast<long long>(r.cheap.hi_budget), r.cheap.lo.mean_live,
          r.cheap.hi.mean_live, static_cast<long long>(r.cheap.hi.peak_live),
          r.diff_pct, r.diff_se_pct, static_cast<long long>(r.same_budget),
          r.evicted_jaccard, r.live_jaccard);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf(
      "entrokv-sim --fidelity: %lld steps, mean memory error at mean live "
      "%.1f (interpolated between adjacent budgets), variant against exact "
      "scoring\n",
      static_cast<long long>(o.steps), target);
  std::printf(
      "| policy | variant | error exact | error variant | diff %% (± SE) "
      "| exact: B (mean live / peak) | variant: B (mean live / peak) "
      "| B same | evicted-set J | live-set J |\n"
      "|---|---|---:|---:|---:|---|---|---:|---:|---:|\n");
  for (const FidelityRow& r : rows) {
    if (!r.exact.found || !r.cheap.found) {
      std::printf("| %s | %s | — | — | — (target out of reach) | | | | | |\n",
                  r.policy.c_str(), r.variant.c_str());
      continue;
    }
    std::printf(
        "| %s | %s | %.5f | %.5f | %+.2f (± %.2f) | %lld–%lld (%.1f–%.1f / "
        "%lld) | %lld–%lld (%.1f–%.1f / %lld) | %lld | %.3f | %.3f |\n",
        r.policy.c_str(), r.variant.c_str(), r.exact.mean_error,
        r.cheap.mean_error, r.diff_pct, r.diff_se_pct,
        static_cast<long long>(r.exact.lo_budget),
        static_cast<long long>(r.exact.hi_budget), r.exact.lo.mean_live,
        r.exact.hi.mean_live, static_cast<long long>(r.exact.hi.peak_live),
        static_cast<long long>(r.cheap.lo_budget),
        static_cast<long long>(r.cheap.hi_budget), r.cheap.lo.mean_live,
        r.cheap.hi.mean_live, static_cast<long long>(r.cheap.hi.peak_live),
        static_cast<long long>(r.same_budget), r.evicted_jaccard,
        r.live_jaccard);
  }
  return 0;
}

}  // namespace
}  // namespace entrokv::sim

int main(int argc, char** argv) {
  // As every entrokv binary: ENTROKV_<FLAG> variables, --help by topic and
  // --version (exit 0), bad input exits 2; a failed check exits 1.
  entrokv::ParseFlags(
      argc, argv,
      {.usage =
           "Reruns the entrokv experiment on a synthetic stream.\n"
           "  entrokv-sim [--compare] [--json] [--steps N] [--budget B] ...\n"
           "  entrokv-sim --fidelity --sketch project:4 [--query_form "
           "group_sum] ...\n"
           "  entrokv-sim --needles --steps 32768 --budget 1024\n"
           "Exit status: 0, 1 when the audit's sanity check fails, 2 on bad "
           "flags.",
       .source_dirs = {"eval/sim/"},
       .groups = {
           {"Run", {"steps", "seed", "sanity_seeds", "compare", "json"}},
           {"Policy",
            {"policy", "affinity_update", "beta", "lambda", "gamma", "budget",
             "target_live", "sinks", "recent", "decide_every", "block_size",
             "block_summary", "cadence_scaled_rates"}},
           {"Shape and sketch",
            {"layers", "kv_heads", "q_heads", "head_dim", "element_type",
             "sketch", "query_form", "scored_layers"}},
           {"Needles",
            {"needles", "needle_count", "needle_min_gap", "needle_max_gap"}},
           {"Fidelity", {"fidelity", "fidelity_policies"}},
       }});
  absl::StatusOr<entrokv::sim::RunOptions> o = entrokv::sim::OptionsFromFlags();
  if (!o.ok()) return entrokv::sim::Fail(o.status());
  const bool json = absl::GetFlag(FLAGS_json);
  if (absl::GetFlag(FLAGS_fidelity)) return entrokv::sim::RunFidelity(*o, json);
  if (absl::GetFlag(FLAGS_needles)) {
    return entrokv::sim::RunNeedleTable(*o, json);
  }
  return absl::GetFlag(FLAGS_compare) ? entrokv::sim::RunCompare(*o, json)
                                      : entrokv::sim::RunAudit(*o, json);
}
