#include "tinyllama/eval_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "entrokv/core/status_macros.h"
#include "tinyllama/eval_curve.h"
#include "tinyllama/eval_flags.h"
#include "tinyllama/eval_output.h"
#include "tinyllama/eval_policies.h"

namespace entrokv::tinyllama {
namespace {

// Every policy at every budget, immediate, and one step late at the
// pipelined budgets.
std::vector<Run> SweepRuns(const std::vector<SessionConfig>& policies,
                           const std::vector<int64_t>& budgets,
                           const std::vector<int64_t>& pipelined) {
  std::vector<Run> runs;
  for (const SessionConfig& policy : policies) {
    for (int64_t budget : budgets) {
      for (int lag : {0, 1}) {
        if (lag == 1 &&
            !std::binary_search(pipelined.begin(), pipelined.end(), budget)) {
          continue;
        }
        Run run;
        run.config = AtBudget(policy, budget);
        run.policy = PolicyName(run.config);
        run.variant = VariantLabel(run.config);
        run.lag = lag;
        runs.push_back(run);
      }
    }
  }
  return runs;
}

// Runs are independent: each worker takes the next one, and prints it.
absl::Status EvaluateRuns(const Model& model,
                          const std::vector<std::vector<int>>& stories,
                          Decider* decider, std::vector<Run>* runs) {
  std::mutex mu;  // Over stdout.
  std::vector<std::function<absl::Status()>> tasks;
  for (Run& each : *runs) {
    tasks.push_back([&, run = &each]() -> absl::Status {
      absl::Status status = Evaluate(model, stories, decider, run);
      if (!status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat(run->policy, " B=", run->config.budget,
                                         ": ", status.message()));
      }
      std::lock_guard<std::mutex> lock(mu);
      std::printf(
          "%-20s B=%-4lld lag %d: ppl %8.4f  mean live %6.1f  "
          "peak %4lld  (%.1fs)\n",
          run->policy.c_str(), static_cast<long long>(run->config.budget),
          run->lag, run->ppl(), run->mean_live(),
          static_cast<long long>(run->peak_live), run->seconds);
      std::fflush(stdout);
      return absl::OkStatus();
    });
  }
  return RunTasks(std::move(tasks), absl::GetFlag(FLAGS_threads));
}

// The immediate runs of each policy, the policies in the order of `runs`.
struct Curves {
  std::vector<std::string> names;
  std::map<std::string, std::vector<const Run*>> immediate;
};

Curves ImmediateCurves(const std::vector<Run>& runs) {
  Curves curves;
  for (const Run& run : runs) {
    if (run.lag != 0) continue;
    if (curves.immediate.find(run.policy) == curves.immediate.end()) {
      curves.names.push_back(run.policy);
    }
    curves.immediate[run.policy].push_back(&run);
  }
  return curves;
}

// Every run, the full cache first.
std::string RunsCsv(const Run& full, const std::vector<Run>& runs,
                    size_t stories) {
  std::string csv =
      "policy,ranking,budget_control,budget,lag,stories,tokens_scored,nll,"
      "perplexity,ppl_increase_pct,mean_live,peak_live,evicted,seconds,"
      "variant\n";
  auto csv_row = [&](const Run& r, const std::string& ranking,
                     const std::string& control) {
    absl::StrAppend(&csv, r.policy, ",", ranking, ",", control, ",",
                    r.config.budget, ",", r.lag, ",", stories, ",", r.predicted,
                    ",", Num(r.nll_sum / r.predicted, 6), ",", Num(r.ppl()),
                    ",", Num(100.0 * (r.ppl() / full.ppl() - 1.0), 2), ",",
                    Num(r.mean_live(), 2), ",", r.peak_live, ",", r.evicted,
                    ",", Num(r.seconds, 2), ",\"", r.variant, "\"\n");
  };
  csv_row(full, "full", "none");
  for (const Run& r : runs) {
    csv_row(r, std::string(RankingName(r.config.ranking)),
            std::string(BudgetControlName(r.config.budget_control)));
  }
  return csv;
}

// The tables: perplexity at equal mean live, and pipelined against
// immediate.
std::string SweepMarkdown(const Run& full, const std::vector<Run>& runs,
                          const Curves& curves,
                          const std::vector<int64_t>& targets) {
  std::string md = absl::StrCat(
      "\nPerplexity at equal mean live entries (log-ppl interpolated in mean "
      "live between measured budgets; full cache ",
      Num(full.ppl()), ", mean live ", Num(full.mean_live(), 1), ")\n\n",
      "| policy |", TargetColumns(targets, "---:|"));
  for (const std::string& name : curves.names) {
    absl::StrAppend(&md, "| ", name, " |");
    for (int64_t target : targets) {
      const double ppl =
          PplAtMeanLive(curves.immediate.at(name), static_cast<double>(target));
      absl::StrAppend(&md, " ", std::isfinite(ppl) ? Num(ppl, 3) : "—", " |");
    }
    absl::StrAppend(&md, "\n");
  }
  absl::StrAppend(&md,
                  "\nPipelined (evictions one token late) against immediate\n\n"
                  "| policy | B | ppl immediate | ppl one step late | mean "
                  "live immediate | mean live late |\n|---|---:|---:|---:|---:|"
                  "---:|\n");
  for (const Run& late : runs) {
    if (late.lag != 1) continue;
    for (const Run& now : runs) {
      if (now.lag == 0 && now.policy == late.policy &&
          now.config.budget == late.config.budget) {
        absl::StrAppend(&md, "| ", late.policy, " | ", late.config.budget,
                        " | ", Num(now.ppl(), 3), " | ", Num(late.ppl(), 3),
                        " | ", Num(now.mean_live(), 1), " | ",
                        Num(late.mean_live(), 1), " |\n");
      }
    }
  }
  return md;
}

// The "equal_mean_live" object: each policy's perplexity at each target.
std::string EqualMeanLiveJson(const Curves& curves,
                              const std::vector<int64_t>& targets) {
  std::string policies;
  for (const std::string& name : curves.names) {
    absl::StrAppend(&policies, policies.empty() ? "" : ",\n",
                    "    {\"policy\": \"", name, "\", \"perplexity\": [");
    for (size_t i = 0; i < targets.size(); ++i) {
      absl::StrAppend(&policies, i ? ", " : "",
                      Num(PplAtMeanLive(curves.immediate.at(name),
                                        static_cast<double>(targets[i]))));
    }
    absl::StrAppend(&policies, "]}");
  }
  return absl::StrCat("\"equal_mean_live\": {\n    \"method\": ",
                      "\"log-perplexity interpolated linearly in mean live "
                      "entries between the two measured budgets around each "
                      "target; null outside the measured range\",\n    "
                      "\"targets\": [",
                      absl::StrJoin(targets, ", "), "],\n    \"policies\": [\n",
                      policies, "\n    ]\n  }");
}

std::string SweepJson(const std::string& data_dir, const std::string& decider,
                      size_t stories, const Run& full,
                      const std::vector<Run>& runs, const Curves& curves,
                      const std::vector<int64_t>& targets) {
  std::string json = absl::StrCat(
      "{\n  \"data\": \"", data_dir, "\",\n  \"decider\": \"", decider,
      "\",\n  \"stories\": ", stories,
      ",\n  \"tokens_scored\": ", full.predicted,
      ",\n  \"full_cache\": {\"nll\": ", Num(full.nll_sum / full.predicted, 6),
      ", \"perplexity\": ", Num(full.ppl()),
      ", \"mean_live\": ", Num(full.mean_live(), 2),
      ", \"peak_live\": ", full.peak_live, "},\n  \"runs\": [\n");
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    absl::StrAppend(
        &json, "    {\"policy\": \"", r.policy, "\", \"ranking\": \"",
        std::string(RankingName(r.config.ranking)),
        "\", \"budget_control\": \"",
        std::string(BudgetControlName(r.config.budget_control)),
        "\", \"variant\": \"", r.variant, "\", \"budget\": ", r.config.budget,
        ", \"lag\": ", r.lag, ", \"nll\": ", Num(r.nll_sum / r.predicted, 6),
        ", \"perplexity\": ", Num(r.ppl()),
        ", \"mean_live\": ", Num(r.mean_live(), 2),
        ", \"peak_live\": ", r.peak_live, ", \"evicted\": ", r.evicted,
        ", \"seconds\": ", Num(r.seconds, 2), "}",
        i + 1 < runs.size() ? ",\n" : "\n");
  }
  absl::StrAppend(&json, "  ],\n  ", EqualMeanLiveJson(curves, targets),
                  "\n}\n");
  return json;
}

// One data block per policy (immediate mode), sorted by mean live.
absl::Status PlotSweep(const std::filesystem::path& out_dir, size_t stories,
                       const Run& full, const Curves& curves) {
  std::string dat;
  std::string plot = absl::StrCat(
      "set terminal pngcairo size 1000,650 font 'sans,10'\n"
      "set output '",
      (out_dir / "tinystories_ppl_vs_live.png").string(),
      "'\nset title 'stories260K on ", stories,
      " TinyStories stories: perplexity vs mean live KV entries'\n"
      "set xlabel 'mean live entries per decode step'\n"
      "set ylabel 'perplexity (log scale)'\nset logscale y\n"
      "set key outside right\nset grid\n"
      "set yrange [",
      Num(0.97 * full.ppl(), 3),
      ":*]\n"
      "plot ");
  int index = 0;
  for (const std::string& name : curves.names) {
    std::vector<const Run*> points = curves.immediate.at(name);
    std::sort(points.begin(), points.end(), [](const Run* a, const Run* b) {
      return a->mean_live() < b->mean_live();
    });
    absl::StrAppend(&dat, "# ", name, "\n");
    for (const Run* r : points) {
      absl::StrAppend(&dat, Num(r->mean_live(), 3), " ", Num(r->ppl(), 5),
                      "\n");
    }
    absl::StrAppend(&dat, "\n\n");
    const bool entropy =
        points[0]->config.budget_control == BudgetControl::kEntropy;
    const int color = static_cast<int>(points[0]->config.ranking) + 1;
    absl::StrAppend(
        &plot, "'", (out_dir / "tinystories_ppl_vs_live.dat").string(),
        "' index ", index++, " with linespoints lc ", color, " dt ",
        entropy ? 2 : 1, " pt ", entropy ? 6 : 7, " title '", name, "', ");
  }
  absl::StrAppend(&plot, Num(full.ppl(), 5),
                  " with lines lc rgb 'black' dt 3 title 'full cache'\n");
  return WritePlot(out_dir, dat, plot);
}

}  // namespace

absl::Status Sweep(const Model& model,
                   const std::vector<std::vector<int>>& stories,
                   Decider* decider, const std::string& data_dir,
                   const std::vector<SessionConfig>& policies,
                   const std::vector<int64_t>& budgets,
                   const std::vector<int64_t>& pipelined,
                   const std::vector<int64_t>& targets, Run full) {
  std::vector<Run> runs = SweepRuns(policies, budgets, pipelined);
  ENTROKV_RETURN_IF_ERROR(EvaluateRuns(model, stories, decider, &runs));
  // Equal mean live: one row per policy, one column per target.
  const Curves curves = ImmediateCurves(runs);
  const std::filesystem::path out_dir = absl::GetFlag(FLAGS_out);
  ENTROKV_RETURN_IF_ERROR(CreateOutputDir(out_dir));

  full.config.budget = 0;
  full.variant = "full";
  ENTROKV_RETURN_IF_ERROR(WriteFile(out_dir / "tinystories_runs.csv",
                                    RunsCsv(full, runs, stories.size())));
  // Markdown tables to stdout, JSON to a file.
  std::printf("%s", SweepMarkdown(full, runs, curves, targets).c_str());
  ENTROKV_RETURN_IF_ERROR(
      WriteFile(out_dir / "tinystories_results.json",
                SweepJson(data_dir, decider->Describe(), stories.size(), full,
                          runs, curves, targets)));
  if (absl::GetFlag(FLAGS_plot)) {
    ENTROKV_RETURN_IF_ERROR(PlotSweep(out_dir, stories.size(), full, curves));
  }
  std::printf("\nwrote %s/tinystories_runs.csv, tinystories_results.json%s\n",
              out_dir.string().c_str(),
              absl::GetFlag(FLAGS_plot) ? ", tinystories_ppl_vs_live.png" : "");
  return absl::OkStatus();
}

}  // namespace entrokv::tinyllama
