#include "tinyllama/eval_protocol_report.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tinyllama/eval_output.h"
#include "tinyllama/eval_policies.h"

namespace entrokv::tinyllama {
namespace {

void AppendTuning(const ProtocolResult& r, std::string* md) {
  absl::StrAppend(md, "\nTuning at mean live ", r.tune_target,
                  " on the tuning stories. Grid: ", r.grid_text,
                  ".\n\n| group | policy | parameters | ppl | budget | "
                  "mean live |\n|---|---|---|---:|---:|---:|\n");
  for (const auto& c : r.candidates) {
    absl::StrAppend(md, "| ", c->group, " | ", PolicyName(c->curve.config),
                    " | ", c->label, " | ", Num(c->point.ppl, 4), " | ",
                    c->point.Budgets(), " | ", Num(c->point.mean_live, 2),
                    " |\n");
  }
}

// The parameters used on the test stories, and their perplexity table.
void AppendPerplexity(const ProtocolResult& r, std::string* md) {
  const TunedParameters& tuned = r.tuned;
  const std::string tuned_text = absl::StrCat(
      "affinity: ", ParamsOf(tuned.affinity),
      "; entropy budget: gamma=", tuned.entropy.entropy_budget.gamma,
      " ema_rate=", tuned.entropy.entropy_budget.ema_rate,
      "; h2o: recent_fraction=", tuned.h2o.h2o.recent_fraction,
      "; streaming: sinks=", tuned.streaming.streaming_sinks,
      "; expected: ema_rate=", tuned.expected.expected.ema_rate,
      "; birth: weight=", tuned.birth.birth.weight,
      "; rkv: lambda=", tuned.rkv.rkv.lambda);
  absl::StrAppend(md, "\nParameters used on the test stories (",
                  r.tuning ? "tuned" : "core's defaults", "): ", tuned_text,
                  "\n\nTest stories: perplexity at equal mean live entries "
                  "(a run within ",
                  Num(100.0 * r.tolerance, 1),
                  "% of the target, else the adjacent budgets B, B+1 around "
                  "it interpolated)\n\n| policy |",
                  TargetColumns(r.targets, "---:|"));
  for (size_t i = 0; i < r.policies.size(); ++i) {
    absl::StrAppend(md, "| ", PolicyName(r.policies[i]), " |");
    for (size_t t = 0; t < r.targets.size(); ++t) {
      absl::StrAppend(md, " ", Num(r.points[i][t].ppl, 3), " |");
    }
    absl::StrAppend(md, "\n");
  }
}

// Whether policy i and the reference both reached target t.
bool Comparable(const ProtocolResult& r, size_t i, size_t t) {
  return r.points[i][t].ok() && r.points[r.ref][t].ok();
}

// The differences against the reference, and the verdict at each target.
void AppendDifferences(const ProtocolResult& r, std::string* md) {
  const std::string ref_name = PolicyName(r.policies[r.ref]);
  absl::StrAppend(md, "\nPerplexity difference against ", ref_name,
                  " at the same mean live, % [", Num(100 * r.level, 0),
                  "% paired bootstrap interval over test stories, ",
                  r.resamples, " resamples, seed ", r.seed,
                  "]; * = the interval excludes 0\n\n| policy |",
                  TargetColumns(r.targets, "---:|"));
  for (size_t i = 0; i < r.policies.size(); ++i) {
    if (i == r.ref) continue;
    absl::StrAppend(md, "| ", PolicyName(r.policies[i]), " |");
    for (size_t t = 0; t < r.targets.size(); ++t) {
      absl::StrAppend(
          md, " ", Comparable(r, i, t) ? DiffCell(r.vs_ref[i][t]) : "—", " |");
    }
    absl::StrAppend(md, "\n");
  }
  absl::StrAppend(md, "\nVerdict against ", ref_name,
                  " on the test stories:\n");
  AppendVerdict(r, r.points, r.vs_ref, md);
}

// The budgets each point used, and how many runs each split took.
void AppendCalibration(const ProtocolResult& r, std::string* md) {
  absl::StrAppend(md,
                  "\nCalibration on the test stories: budget (mean live / "
                  "peak live)\n\n| policy |",
                  TargetColumns(r.targets, "---|"));
  int64_t test_runs = 0;
  for (size_t i = 0; i < r.policies.size(); ++i) {
    test_runs += static_cast<int64_t>(r.curves[i]->runs.size());
    absl::StrAppend(md, "| ", PolicyName(r.policies[i]), " |");
    for (size_t t = 0; t < r.targets.size(); ++t) {
      const Point& p = r.points[i][t];
      absl::StrAppend(md, " ", p.Budgets(), " (", Num(p.mean_live, 2), " / ",
                      p.peak_live, ") |");
    }
    absl::StrAppend(md, "\n");
  }
  int64_t tune_runs = 0;
  for (const auto& c : r.candidates) {
    tune_runs += static_cast<int64_t>(c->curve.runs.size());
  }
  absl::StrAppend(md, "\n", tune_runs, " runs of ", r.split.tune.size(),
                  " tuning stories, ", test_runs, " runs of ",
                  r.split.test.size(), " test stories\n");
}

// A point's measure `m` over every test story: Σ num / Σ den.
double PointMeasure(const Point& p, const RecallMeasure& m) {
  double num = 0.0, den = 0.0;
  for (const StoryRecall& s : p.story_recall) {
    num += m.num(s);
    den += m.den(s);
  }
  return num / den;
}

std::string AgreementCell(const RankAgreement& a) {
  if (!std::isfinite(a.rho)) return "—";
  return absl::StrFormat("%+.3f [%+.3f, %+.3f]", a.rho, a.lo, a.hi);
}

// --recall: each point's mean recall (and the oracle's), then how well each
// measure ranks the points as perplexity does.
void AppendRecall(const ProtocolResult& r, std::string* md) {
  const RecallMeasure& mean = RecallMeasures()[0];
  const RecallMeasure oracle{
      "", "", [](const StoryRecall& s) { return s.oracle_sum; },
      [](const StoryRecall& s) { return s.steps; }};
  absl::StrAppend(md,
                  "\nTest stories: mean attention recall of each point (the "
                  "oracle's at the same budgets in brackets)\n\n| policy |",
                  TargetColumns(r.targets, "---:|"));
  for (size_t i = 0; i < r.policies.size(); ++i) {
    absl::StrAppend(md, "| ", PolicyName(r.policies[i]), " |");
    for (size_t t = 0; t < r.targets.size(); ++t) {
      const Point& p = r.points[i][t];
      absl::StrAppend(md, " ",
                      p.ok() ? absl::StrCat(Num(PointMeasure(p, mean), 4), " (",
                                            Num(PointMeasure(p, oracle), 4),
                                            ")")
                             : "—",
                      " |");
    }
    absl::StrAppend(md, "\n");
  }
  absl::StrAppend(
      md,
      "\nRank agreement with perplexity: Spearman ρ(measure, −ppl) over the "
      "points (+1: a higher measure always comes with a lower perplexity) [",
      Num(100 * r.level, 0), "% bootstrap interval over test stories, ",
      r.resamples, " resamples, seed ", r.seed,
      "]. pooled: every policy at every target; within: the mean over targets "
      "of ρ among the policies at that target (equal memory); competitive: "
      "without keynorm and random\n\n"
      "| measure | policies | pooled | within | meaning |\n"
      "|---|---|---:|---:|---|\n");
  const std::vector<RecallMeasure>& measures = RecallMeasures();
  for (bool competitive : {false, true}) {
    const std::vector<MeasureAgreement>& rows =
        competitive ? r.recall_agreement_competitive : r.recall_agreement;
    for (size_t m = 0; m < rows.size(); ++m) {
      absl::StrAppend(md, "| ", measures[m].name, " | ",
                      competitive ? "competitive" : "all", " | ",
                      AgreementCell(rows[m].pooled), " | ",
                      AgreementCell(rows[m].within), " | ",
                      measures[m].meaning, " |\n");
    }
  }
}

}  // namespace

std::string ProtocolReport(const ProtocolResult& r) {
  std::string md =
      absl::StrCat("\nSplit: ", r.split_text, "\n", r.full_text, "\n");
  if (r.long_window > 0) absl::StrAppend(&md, r.key_text, "\n");
  if (r.tuning) AppendTuning(r, &md);
  AppendPerplexity(r, &md);
  AppendDifferences(r, &md);
  AppendLongPerplexity(r, &md);
  AppendCalibration(r, &md);
  AppendEqualPeak(r, &md);
  if (r.recall) AppendRecall(r, &md);
  return md;
}

std::string ProtocolCsv(const ProtocolResult& r) {
  std::string csv =
      "split,policy,parameters,target_mean_live,budgets,mean_live,peak_live,"
      "perplexity,pct_over_full,pct_over_full_lo,pct_over_full_hi,"
      "diff_vs_reference_pct,diff_lo,diff_hi,significant,long_perplexity,"
      "long_diff_vs_reference_pct,long_diff_lo,long_diff_hi,long_significant"
      "\n";
  auto rows = [&](const char* split,
                  const std::vector<std::vector<Point>>& points,
                  const std::vector<std::vector<PairedDifference>>& vs_full,
                  const std::vector<std::vector<PairedDifference>>& vs_ref,
                  const std::vector<std::vector<PairedDifference>>& long_ref) {
    for (size_t i = 0; i < r.policies.size(); ++i) {
      for (size_t t = 0; t < r.targets.size(); ++t) {
        const Point& p = points[i][t];
        const PairedDifference& f = vs_full[i][t];
        const PairedDifference& d = vs_ref[i][t];
        absl::StrAppend(
            &csv, split, ",", PolicyName(r.policies[i]), ",\"",
            ParamsOf(r.policies[i]), "\",", r.targets[t], ",", p.Budgets(), ",",
            Num(p.mean_live, 3), ",", p.peak_live, ",", Num(p.ppl, 5), ",",
            Num(f.pct, 3), ",", Num(f.lo_pct, 3), ",", Num(f.hi_pct, 3), ",",
            Num(d.pct, 3), ",", Num(d.lo_pct, 3), ",", Num(d.hi_pct, 3), ",",
            d.significant() ? 1 : 0, ",", Num(p.long_ppl, 5));
        if (long_ref.empty()) {
          absl::StrAppend(&csv, ",,,,\n");
        } else {
          const PairedDifference& l = long_ref[i][t];
          absl::StrAppend(&csv, ",", Num(l.pct, 3), ",", Num(l.lo_pct, 3), ",",
                          Num(l.hi_pct, 3), ",", l.significant() ? 1 : 0, "\n");
        }
      }
    }
  };
  rows("test", r.points, r.vs_full, r.vs_ref, r.long_vs_ref);
  if (r.equal_peak) {
    rows("test_equal_peak", r.peak_points, r.peak_vs_full, r.peak_vs_ref,
         r.peak_long_vs_ref);
  }
  for (const auto& c : r.candidates) {
    absl::StrAppend(&csv, "tune,", PolicyName(c->curve.config), ",\"", c->label,
                    "\",", r.tune_target, ",", c->point.Budgets(), ",",
                    Num(c->point.mean_live, 3), ",", c->point.peak_live, ",",
                    Num(c->point.ppl, 5), ",,,,,,,,,,,,\n");
  }
  return csv;
}

std::string ProtocolRunsCsv(const ProtocolResult& r) {
  std::string csv =
      "split,policy,parameters,budget,nll,perplexity,mean_live,peak_live,"
      "seconds\n";
  auto run_rows = [&](const char* which, const Curve& curve) {
    for (const auto& [b, run] : curve.runs) {
      absl::StrAppend(&csv, which, ",", run.policy, ",\"", ParamsOf(run.config),
                      "\",", b, ",", Num(run.nll_sum / run.predicted, 6), ",",
                      Num(run.ppl(), 5), ",", Num(run.mean_live(), 3), ",",
                      run.peak_live, ",", Num(run.seconds, 2), "\n");
    }
  };
  for (const auto& c : r.candidates) run_rows("tune", c->curve);
  for (const auto& c : r.curves) run_rows("test", *c);
  for (const auto& c : r.peak_curves) {
    if (c != nullptr) run_rows("test_equal_peak", *c);
  }
  return csv;
}

namespace {

// [pct, lo, hi].
std::string JsonDiff(const PairedDifference& d) {
  return absl::StrCat("[", Num(d.pct, 3), ", ", Num(d.lo_pct, 3), ", ",
                      Num(d.hi_pct, 3), "]");
}

// The 1-based story numbers of `v`, as a JSON list.
std::string StoryNumbers(const std::vector<int>& v) {
  std::vector<int> one;
  for (int i : v) one.push_back(i + 1);
  return absl::StrCat("[", absl::StrJoin(one, ", "), "]");
}

// Up to the tuning candidates' list, opened.
std::string JsonHead(const ProtocolResult& r) {
  return absl::StrCat(
      "{\n  \"data\": ", JsonString(r.data_dir),
      ",\n  \"decider\": ", JsonString(r.decider),
      ",\n  \"stories\": ", r.stories,
      ",\n  \"split\": {\"tune\": ", StoryNumbers(r.split.tune),
      ", \"test\": ", StoryNumbers(r.split.test),
      ", \"tune_tokens\": ", r.tune_tokens,
      ", \"test_tokens\": ", r.test_tokens,
      ", \"numbering\": \"1-based story index in tinystories_valid_head.txt\"},"
      "\n  \"full_cache\": {\"perplexity_all\": ",
      Num(r.full.ppl()), ", \"perplexity_tune\": ", Num(r.full_tune_ppl),
      ", \"perplexity_test\": ", Num(r.full_test_ppl),
      ", \"mean_live\": ", Num(r.full.mean_live(), 2),
      ", \"peak_live\": ", r.full.peak_live,
      "},\n  \"calibration\": {\"tolerance_fraction\": ", r.tolerance,
      ", \"method\": \"budget search (secant, then bisection) on the integer "
      "nominal budget; a run within the tolerance of the target is used as "
      "is, else the adjacent budgets B, B+1 bracketing the target are "
      "interpolated (per-story NLL, i.e. log-perplexity, linear in mean "
      "live)\"},\n  \"bootstrap\": {\"resamples\": ",
      r.resamples, ", \"seed\": ", r.seed, ", \"level\": ", r.level,
      ", \"reference\": ", JsonString(PolicyName(r.policies[r.ref])),
      "},\n  \"long_range\": {\"enabled\": ",
      r.long_window > 0 ? "true" : "false",
      ", \"short_window_budget\": ", r.long_window,
      ", \"alpha\": ", r.key_params.alpha, ", \"beta\": ", r.key_params.beta,
      ", \"key_tokens\": ", r.key_token_count,
      ", \"test_tokens\": ", r.test_tokens,
      ", \"full_cache_long_perplexity\": ", Num(r.full_test_long_ppl),
      ", \"short_window_long_perplexity\": ", Num(r.short_test_long_ppl),
      ", \"short_window_perplexity\": ", Num(r.short_test_ppl),
      ", \"method\": \"LongPPL (arXiv:2410.23771): a scored test token is a "
      "key token when NLL(window+fixed at short_window_budget) - NLL(full "
      "cache) > alpha and -NLL(full cache) > beta; chosen once per story; "
      "long_perplexity = exp(sum of NLL over key tokens / key tokens)\"},"
      "\n  \"equal_peak\": {\"enabled\": ", r.equal_peak ? "true" : "false",
      ", \"method\": \"each policy at the reference's nominal budgets for "
      "the target, combined with the reference's interpolation weight; an "
      "entropy-controlled budget capped at the nominal one "
      "(entropy_budget.max_budget = budget), so no step holds more entries "
      "than the reference's\"},"
      "\n  \"tuning\": {\"enabled\": ", r.tuning ? "true" : "false",
      ", \"target_mean_live\": ", r.tune_target,
      ", \"grid\": ", JsonString(r.grid_text), ", \"candidates\": [");
}

void AppendJsonTuning(const ProtocolResult& r, std::string* json) {
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const Candidate& c = *r.candidates[i];
    absl::StrAppend(json, i ? "," : "",
                    "\n    {\"group\": ", JsonString(c.group),
                    ", \"policy\": ", JsonString(PolicyName(c.curve.config)),
                    ", \"parameters\": ", JsonString(c.label),
                    ", \"perplexity\": ", Num(c.point.ppl),
                    ", \"budgets\": ", JsonString(c.point.Budgets()),
                    ", \"mean_live\": ", Num(c.point.mean_live, 3), "}");
  }
  const TunedParameters& tuned = r.tuned;
  absl::StrAppend(
      json, "],\n    \"tuned\": {\"affinity_update\": ",
      JsonString(
          std::string(AffinityUpdateName(tuned.affinity.affinity.update))),
      ", \"affinity_beta\": ", tuned.affinity.affinity.beta,
      ", \"affinity_lambda\": ", tuned.affinity.affinity.lambda,
      ", \"entropy_gamma\": ", tuned.entropy.entropy_budget.gamma,
      ", \"entropy_ema_rate\": ", tuned.entropy.entropy_budget.ema_rate,
      ", \"h2o_recent_fraction\": ", tuned.h2o.h2o.recent_fraction,
      ", \"streaming_sinks\": ", tuned.streaming.streaming_sinks,
      ", \"expected_ema_rate\": ", tuned.expected.expected.ema_rate,
      ", \"birth_weight\": ", tuned.birth.birth.weight,
      ", \"rkv_lambda\": ", tuned.rkv.rkv.lambda,
      "}},\n  \"targets\": [", absl::StrJoin(r.targets, ", "),
      "],\n  \"test\": [");
}

void AppendJsonTest(const ProtocolResult& r, std::string* json) {
  for (size_t i = 0; i < r.policies.size(); ++i) {
    absl::StrAppend(json, i ? "," : "", "\n    {\"policy\": ",
                    JsonString(PolicyName(r.policies[i])),
                    ", \"parameters\": ", JsonString(ParamsOf(r.policies[i])),
                    ", \"points\": [");
    for (size_t t = 0; t < r.targets.size(); ++t) {
      const Point& p = r.points[i][t];
      const PairedDifference& f = r.vs_full[i][t];
      const PairedDifference& d = r.vs_ref[i][t];
      absl::StrAppend(
          json, t ? ", " : "", "{\"target\": ", r.targets[t],
          ", \"budgets\": ", JsonString(p.Budgets()),
          ", \"mean_live\": ", Num(p.mean_live, 3),
          ", \"peak_live\": ", p.peak_live, ", \"perplexity\": ", Num(p.ppl),
          ", \"pct_over_full\": [", Num(f.pct, 3), ", ", Num(f.lo_pct, 3), ", ",
          Num(f.hi_pct, 3), "], \"diff_vs_reference_pct\": [", Num(d.pct, 3),
          ", ", Num(d.lo_pct, 3), ", ", Num(d.hi_pct, 3),
          "], \"significant\": ", d.significant() ? "true" : "false",
          ", \"long_perplexity\": ", Num(p.long_ppl));
      if (!r.long_vs_ref.empty()) {
        absl::StrAppend(json, ", \"long_pct_over_full\": ",
                        JsonDiff(r.long_vs_full[i][t]),
                        ", \"long_diff_vs_reference_pct\": ",
                        JsonDiff(r.long_vs_ref[i][t]));
      }
      if (r.equal_peak) {
        const Point& q = r.peak_points[i][t];
        absl::StrAppend(
            json, ", \"equal_peak\": {\"budgets\": ", JsonString(q.Budgets()),
            ", \"mean_live\": ", Num(q.mean_live, 3),
            ", \"peak_live\": ", q.peak_live, ", \"perplexity\": ", Num(q.ppl),
            ", \"pct_over_full\": ", JsonDiff(r.peak_vs_full[i][t]),
            ", \"diff_vs_reference_pct\": ", JsonDiff(r.peak_vs_ref[i][t]),
            ", \"long_perplexity\": ", Num(q.long_ppl));
        if (!r.peak_long_vs_ref.empty()) {
          absl::StrAppend(json, ", \"long_diff_vs_reference_pct\": ",
                          JsonDiff(r.peak_long_vs_ref[i][t]));
        }
        absl::StrAppend(json, "}");
      }
      if (r.recall) {
        absl::StrAppend(json, ", \"recall\": {");
        const std::vector<RecallMeasure>& measures = RecallMeasures();
        for (size_t m = 0; m < measures.size(); ++m) {
          absl::StrAppend(json, m ? ", " : "", JsonString(measures[m].name),
                          ": ", p.ok() ? Num(PointMeasure(p, measures[m]), 6)
                                       : "null");
        }
        absl::StrAppend(json, "}");
      }
      absl::StrAppend(json, "}");
    }
    absl::StrAppend(json, "]}");
  }
}

}  // namespace

std::string ProtocolJson(const ProtocolResult& r) {
  std::string json = JsonHead(r);
  AppendJsonTuning(r, &json);
  AppendJsonTest(r, &json);
  absl::StrAppend(&json, "\n  ]");
  if (r.recall) {
    absl::StrAppend(&json, ",\n  \"recall_agreement\": [");
    const std::vector<RecallMeasure>& measures = RecallMeasures();
    const char* sep = "";
    for (bool competitive : {false, true}) {
      const std::vector<MeasureAgreement>& rows =
          competitive ? r.recall_agreement_competitive : r.recall_agreement;
      for (size_t m = 0; m < rows.size(); ++m) {
        const MeasureAgreement& a = rows[m];
        absl::StrAppend(
            &json, sep, "\n    {\"measure\": ", JsonString(measures[m].name),
            ", \"policies\": \"", competitive ? "competitive" : "all",
            "\", \"pooled\": [", Num(a.pooled.rho, 4), ", ",
            Num(a.pooled.lo, 4), ", ", Num(a.pooled.hi, 4), "], \"within\": [",
            Num(a.within.rho, 4), ", ", Num(a.within.lo, 4), ", ",
            Num(a.within.hi, 4), "], \"groups\": ", a.groups, "}");
        sep = ",";
      }
    }
    absl::StrAppend(&json, "\n  ]");
  }
  absl::StrAppend(&json, "\n}\n");
  return json;
}

}  // namespace entrokv::tinyllama
