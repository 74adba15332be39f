// entrokv-eval: perplexity of stories260K on TinyStories against KV-cache
// memory, for every entrokv policy (ranking × budget controller).
//
// The default run is the protocol (docs/results-tinystories.md): the stories
// are split into a tuning set (the first --tune) and a disjoint test set (the
// rest). On the tuning stories a small grid of policy parameters (affinity
// lambda / update rule, entropy-budget gamma and EMA rate, h2o's recent share,
// streaming's sinks) is searched at one target mean live (--tune_target).
// Then every policy, with the tuned parameters, is calibrated on the test
// stories to each target mean live (--targets) by a search on the integer
// nominal budget (SearchBudget: a run within --tolerance of the target, else
// the adjacent budgets B, B+1 around it, interpolated), with the example
// engine evaluating the stories teacher-forced and entrokv deciding evictions
// at every decode step (in process, or over gRPC through the client library).
// Each policy's perplexity is compared with window+fixed at the same target by
// a paired bootstrap over test stories (docs/design.md "Fair comparison": equal
// MEAN live entries). Writes <out>/tinystories_report.md,
// tinystories_protocol.csv, tinystories_runs.csv, tinystories_results.json
// and, with gnuplot, tinystories_ppl_vs_live.png.
//
// --sweep runs every policy at nominal --budgets instead (curves; log-
// perplexity interpolated between measured budgets at each target) and, one
// token late, at --pipelined_budgets.
//
// Variants (--sketch, --query_form, --scored_layers, --decide_every,
// --block_size, --block_summary) apply a cheaper way of scoring to every
// policy. --fidelity measures what a variant costs (docs/fidelity.md): each
// policy is run scored exactly and with the variant; for each target mean
// live T the nominal budget of each is searched until two adjacent budgets
// bracket T, log-perplexity is interpolated between them, and the evictions of
// the two at the same nominal budget are compared. Writes
// <out>/fidelity.csv.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/logging.h"
#include "entrokv/core/config.h"
#include "entrokv/core/status_macros.h"
#include "eval/lib/budget_search.h"
#include "eval/lib/interpolate.h"
#include "eval/lib/overlap.h"
#include "tinyllama/calibrate.h"
#include "tinyllama/decider.h"
#include "tinyllama/eval_curve.h"
#include "tinyllama/eval_fidelity.h"
#include "tinyllama/eval_flags.h"
#include "tinyllama/eval_output.h"
#include "tinyllama/eval_policies.h"
#include "tinyllama/eval_run.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/progress.h"
#include "tinyllama/model.h"
#include "tinyllama/tokenizer.h"
#ifdef ENTROKV_TINYLLAMA_HAVE_CLIENT
#include "tinyllama/grpc_decider.h"
#endif

namespace entrokv::tinyllama {
namespace {

// ---------------------------------------------------------------------------
// The protocol: tune on the tuning split at one target, then every policy with
// the tuned parameters on the test split at every target, each calibrated to
// the target mean live by budget search, and compared with window+fixed by a
// paired bootstrap over test stories.

// First guesses of the budget for a target, per budget controller: the ratio
// budget / target of the last point calibrated with that controller.
class BudgetHints {
 public:
  int64_t Guess(const SessionConfig& c, double target) {
    std::lock_guard<std::mutex> lock(mu_);
    const int key = static_cast<int>(c.budget_control);
    auto it = ratio_.find(key);
    const double ratio = it != ratio_.end() ? it->second
                         : c.budget_control == BudgetControl::kEntropy ? 1.6
                                                                       : 1.05;
    return std::max<int64_t>(1, std::llround(target * ratio));
  }
  void Learn(const SessionConfig& c, const Point& p, double target) {
    if (!p.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    ratio_[static_cast<int>(c.budget_control)] =
        static_cast<double>(p.runs[0]->config.budget) / target;
  }

 private:
  std::mutex mu_;
  std::map<int, double> ratio_;
};

// One configuration tried while tuning.
struct Candidate {
  std::string group;  // The parameters it tunes.
  std::string label;
  Curve curve;
  Point point;  // At the tuning target, on the tuning stories.
};

std::string DiffCell(const PairedDifference& d) {
  return absl::StrFormat("%+.2f [%+.2f, %+.2f]%s", d.pct, d.lo_pct, d.hi_pct,
                         d.significant() ? " *" : "");
}

double SubsetPpl(const Run& full, const std::vector<int>& indices) {
  double nll = 0.0;
  int64_t tokens = 0;
  for (int i : indices) {
    nll += full.story_nll[i];
    tokens += full.story_tokens[i];
  }
  return tokens > 0 ? std::exp(nll / static_cast<double>(tokens))
                    : std::numeric_limits<double>::quiet_NaN();
}

// Three panels: the competitive policies' perplexity over the full cache and
// their difference against the reference (both with bootstrap intervals), and
// every policy on a log scale (keynorm and random live only there).
absl::Status PlotProtocol(
    const std::filesystem::path& out_dir,
    const std::vector<SessionConfig>& policies,
    const std::vector<int64_t>& targets,
    const std::vector<std::vector<Point>>& points,
    const std::vector<std::vector<PairedDifference>>& vs_full,
    const std::vector<std::vector<PairedDifference>>& vs_ref, size_t ref,
    size_t test_stories, double full_ppl) {
  auto outlier = [](const SessionConfig& c) {
    return c.ranking == Ranking::kKeyNorm || c.ranking == Ranking::kRandom;
  };
  auto color = [](Ranking r) -> const char* {
    switch (r) {
      case Ranking::kWindow:
        return "#000000";
      case Ranking::kStreaming:
        return "#1f77b4";
      case Ranking::kH2o:
        return "#2ca02c";
      case Ranking::kTova:
        return "#9467bd";
      case Ranking::kKeyNorm:
        return "#8c564b";
      case Ranking::kRandom:
        return "#ff7f0e";
      case Ranking::kAffinity:
        return "#d62728";
    }
    return "#000000";
  };
  // Filled point types for fixed, the open ones for entropy.
  auto point_type = [](const SessionConfig& c) {
    static constexpr int kFilled[] = {5, 7, 9, 11, 13, 3, 15};
    const int p = kFilled[static_cast<int>(c.ranking) % 7];
    return c.budget_control == BudgetControl::kEntropy && p != 3 ? p - 1 : p;
  };
  size_t competitive = 0;
  for (const SessionConfig& c : policies) competitive += !outlier(c);
  std::string dat;
  std::vector<std::string> panel_a, panel_b, panel_c;
  size_t k = 0;
  // Panel 2's range: the competitive policies' intervals, h2o's left out
  // when it is far above the rest (it is in panel 1).
  double b_lo = -0.5, b_hi = 0.5;
  bool clipped = false;
  for (size_t pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < policies.size(); ++i) {
      if (outlier(policies[i]) || i == ref) continue;
      const bool h2o = policies[i].ranking == Ranking::kH2o;
      if ((pass == 0) == h2o) continue;
      for (size_t t = 0; t < targets.size(); ++t) {
        if (!points[i][t].ok()) continue;
        const PairedDifference& d = vs_ref[i][t];
        if (pass == 1 && (d.hi_pct > b_hi + 2.0 || d.lo_pct < b_lo - 2.0)) {
          clipped = true;
          continue;
        }
        b_lo = std::min(b_lo, d.lo_pct);
        b_hi = std::max(b_hi, d.hi_pct);
      }
    }
  }
  const std::string dat_path =
      (out_dir / "tinystories_ppl_vs_live.dat").string();
  for (size_t i = 0; i < policies.size(); ++i) {
    const SessionConfig& c = policies[i];
    const double jitter =
        outlier(c) ? 0.0
                   : (static_cast<double>(k++) -
                      (static_cast<double>(competitive) - 1.0) / 2.0) *
                         0.45;
    absl::StrAppend(&dat, "# ", PolicyName(c),
                    ": mean_live x pct_over_full lo hi diff lo hi ppl\n");
    for (size_t t = 0; t < targets.size(); ++t) {
      const Point& p = points[i][t];
      if (!p.ok()) continue;
      absl::StrAppend(
          &dat, Num(p.mean_live, 3), " ",
          Num(static_cast<double>(targets[t]) + jitter, 3), " ",
          Num(vs_full[i][t].pct, 3), " ", Num(vs_full[i][t].lo_pct, 3), " ",
          Num(vs_full[i][t].hi_pct, 3), " ", Num(vs_ref[i][t].pct, 3), " ",
          Num(vs_ref[i][t].lo_pct, 3), " ", Num(vs_ref[i][t].hi_pct, 3), " ",
          Num(p.ppl, 5), "\n");
    }
    absl::StrAppend(&dat, "\n\n");
    const bool entropy = c.budget_control == BudgetControl::kEntropy;
    const std::string line =
        absl::StrCat(" lc rgb '", color(c.ranking), "' dt ", entropy ? 2 : 1,
                     " pt ", point_type(c), " ps 1.1 lw ",
                     c.ranking == Ranking::kAffinity ? 2.5 : 1.5);
    const std::string style =
        absl::StrCat(line, " title '", PolicyName(c), "'");
    const std::string source = absl::StrCat("'", dat_path, "' index ", i);
    if (!outlier(c)) {
      panel_a.push_back(
          absl::StrCat(source, " using 2:3:4:5 with yerrorlines", style));
      if (i != ref) {
        panel_b.push_back(absl::StrCat(
            source, " using 2:6:7:8 with yerrorlines", line, " notitle"));
      }
    }
    panel_c.push_back(
        absl::StrCat(source, " using 2:9 with linespoints", style));
  }
  const std::string png = (out_dir / "tinystories_ppl_vs_live.png").string();
  std::string plot = absl::StrCat(
      "set terminal pngcairo size 1800,620 font 'sans,10'\n"
      "set output '",
      png,
      "'\n"
      "set multiplot layout 1,3 title 'stories260K, ",
      test_stories,
      " test TinyStories stories: each policy calibrated to the target mean "
      "live entries (x), bars = 95% paired bootstrap intervals; points "
      "shifted sideways to stay apart' font 'sans,12'\n"
      "set grid\nset key top right font 'sans,9'\n"
      "set xlabel 'mean live KV entries per decode step'\n"
      "set xrange [",
      targets.front() - 6, ":", targets.back() + 6, "]\n", "set xtics (",
      absl::StrJoin(targets, ", "), ")\n",
      "set title 'perplexity over the full cache (", Num(full_ppl, 3),
      "), %: keynorm and random left out (right panel)'\n"
      "set ylabel '% over full-cache perplexity'\nset yrange [0:*]\n"
      "plot ",
      absl::StrJoin(panel_a, ", \\\n     "), "\n",
      "set title 'difference against window+fixed at the same mean live, %",
      clipped ? " (h2o off the scale: left panel)" : "",
      "'\nset ylabel '% perplexity over window+fixed (below 0: better)'\n"
      "set yrange [",
      Num(b_lo - 0.3, 2), ":", Num(b_hi + 0.3, 2),
      "]\n"
      "plot 0 with lines lc rgb '#000000' lw 1 notitle, ",
      absl::StrJoin(panel_b, ", \\\n     "), "\n",
      "set title 'every policy, perplexity (log scale)'\n"
      "set ylabel 'perplexity'\nset logscale y\nset yrange [",
      Num(0.95 * full_ppl, 3),
      ":*]\nset key top right "
      "font 'sans,8'\n"
      "plot ",
      absl::StrJoin(panel_c, ", \\\n     "), ", ", Num(full_ppl, 5),
      " with lines lc rgb '#000000' dt 3 title 'full cache'\n"
      "unset multiplot\n");
  ENTROKV_RETURN_IF_ERROR(WriteFile(dat_path, dat));
  const std::string gp = (out_dir / "tinystories_ppl_vs_live.gp").string();
  ENTROKV_RETURN_IF_ERROR(WriteFile(gp, plot));
  const std::string command = absl::StrCat("gnuplot '", gp, "'");
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "gnuplot failed; the data and script are in %s\n",
                 out_dir.string().c_str());
  }
  return absl::OkStatus();
}

absl::Status Protocol(const Model& model,
                      const std::vector<std::vector<int>>& stories,
                      Decider* decider, const std::string& data_dir,
                      std::vector<SessionConfig> policies,
                      const std::vector<int64_t>& targets) {
  const bool quick = absl::GetFlag(FLAGS_quick);
  const int threads = absl::GetFlag(FLAGS_threads);
  const double tolerance = absl::GetFlag(FLAGS_tolerance);
  const int resamples = quick ? 200 : absl::GetFlag(FLAGS_bootstrap);
  const uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  const double tune_target = absl::GetFlag(FLAGS_tune_target);
  const StorySplit split =
      quick
          ? SplitStories(static_cast<int>(stories.size()), 8, 8)
          : SplitStories(static_cast<int>(stories.size()),
                         absl::GetFlag(FLAGS_tune), absl::GetFlag(FLAGS_test));
  if (split.test.empty()) {
    return BadInput(absl::InvalidArgumentError(
        absl::StrCat("no test stories: ", stories.size(),
                     " stories read, --tune ", absl::GetFlag(FLAGS_tune))));
  }
  std::vector<std::vector<int>> tune_stories, test_stories;
  int64_t tune_tokens = 0, test_tokens = 0;
  for (int i : split.tune) {
    tune_stories.push_back(stories[i]);
    tune_tokens += static_cast<int64_t>(stories[i].size()) - 1;
  }
  for (int i : split.test) {
    test_stories.push_back(stories[i]);
    test_tokens += static_cast<int64_t>(stories[i].size()) - 1;
  }
  auto range = [](const std::vector<int>& v) -> std::string {
    if (v.empty()) return "none";
    return absl::StrCat(v.front() + 1, "–", v.back() + 1);
  };
  const std::string split_text = absl::StrCat(
      "tune: stories ", range(split.tune), " (", split.tune.size(),
      " stories, ", tune_tokens, " scored tokens); test: stories ",
      range(split.test), " (", split.test.size(), " stories, ", test_tokens,
      " scored tokens); disjoint; numbered from 1 in "
      "tinystories_valid_head.txt");
  std::printf("split: %s\n", split_text.c_str());

  Run full;
  full.policy = "full";
  ENTROKV_RETURN_IF_ERROR(Evaluate(model, stories, nullptr, &full));
  const double full_test_ppl = SubsetPpl(full, split.test);
  const double full_tune_ppl = SubsetPpl(full, split.tune);
  std::vector<double> full_test_nll;
  for (int i : split.test) full_test_nll.push_back(full.story_nll[i]);
  const std::string full_text = absl::StrFormat(
      "full cache: ppl %.4f on all %zu stories (mean live %.1f, peak %lld); "
      "tune split %.4f; test split %.4f",
      full.ppl(), stories.size(), full.mean_live(),
      static_cast<long long>(full.peak_live), full_tune_ppl, full_test_ppl);
  std::printf("%s\n", full_text.c_str());

  auto named = [&](const std::string& name) -> absl::StatusOr<SessionConfig> {
    SessionConfig config = EngineSessionConfig(model.config(), 1);
    ENTROKV_RETURN_IF_ERROR(ApplyPolicyName(name, &config));
    ENTROKV_RETURN_IF_ERROR(ApplyVariant(model.config(), &config));
    return config;
  };
  BudgetHints hints;
  auto calibrate = [&](CurveSearch* sweep, Curve* curve,
                       double target) -> absl::StatusOr<Point> {
    ENTROKV_ASSIGN_OR_RETURN(
        Point p, sweep->Calibrate(curve, target, tolerance * target,
                                  hints.Guess(curve->config, target)));
    hints.Learn(curve->config, p, target);
    return p;
  };

  // Tuning. Stage 1: each group's first parameter; stage 2: the entropy
  // EMA rate at the best gamma. The default comes first in each group and
  // a candidate must be strictly better to replace it.
  std::vector<std::unique_ptr<Candidate>> candidates;
  SessionConfig tuned_affinity, tuned_entropy, tuned_h2o, tuned_streaming;
  ENTROKV_ASSIGN_OR_RETURN(tuned_affinity, named("affinity+fixed"));
  ENTROKV_ASSIGN_OR_RETURN(tuned_entropy, named("affinity+entropy"));
  ENTROKV_ASSIGN_OR_RETURN(tuned_h2o, named("h2o+fixed"));
  ENTROKV_ASSIGN_OR_RETURN(tuned_streaming, named("streaming+fixed"));
  std::string grid_text;
  const bool tuning = absl::GetFlag(FLAGS_tuning) && !split.tune.empty();
  if (tuning) {
    CurveSearch tune_sweep(model, tune_stories, decider,
                             /*record_evictions=*/false);
    auto add = [&](const std::string& group, const std::string& label,
                   SessionConfig config) {
      auto c = std::make_unique<Candidate>();
      c->group = group;
      c->label = label;
      c->curve.config = config;
      c->curve.label = absl::StrCat("tune ", label);
      candidates.push_back(std::move(c));
    };
    auto run_from = [&](size_t first) -> absl::Status {
      std::vector<std::function<absl::Status()>> tasks;
      for (size_t i = first; i < candidates.size(); ++i) {
        tasks.push_back([&, i]() -> absl::Status {
          ENTROKV_ASSIGN_OR_RETURN(
              candidates[i]->point,
              calibrate(&tune_sweep, &candidates[i]->curve, tune_target));
          return absl::OkStatus();
        });
      }
      return RunTasks(std::move(tasks), threads);
    };
    auto best = [&](const std::string& group) -> const Candidate* {
      const Candidate* b = nullptr;
      for (const auto& c : candidates) {
        if (c->group != group || !c->point.ok()) continue;
        if (b == nullptr || c->point.ppl < b->point.ppl) b = c.get();
      }
      return b;
    };
    const std::vector<double> lambdas =
        quick ? std::vector<double>{0.9, 0.97}
              : std::vector<double>{0.9, 0.7, 0.97, 0.99};
    const std::vector<double> seed_betas =
        quick ? std::vector<double>{} : std::vector<double>{1.0, 4.0};
    const std::vector<double> gammas =
        quick ? std::vector<double>{0.5, 0.25}
              : std::vector<double>{0.5, 0.25, 0.75};
    const std::vector<double> rates =
        quick ? std::vector<double>{0.2} : std::vector<double>{0.01, 0.2};
    const std::vector<double> fractions =
        quick ? std::vector<double>{0.5, 0.25}
              : std::vector<double>{0.5, 0.25, 0.75};
    const std::vector<int64_t> sinks =
        quick ? std::vector<int64_t>{4, 1} : std::vector<int64_t>{4, 1, 16};
    // One candidate per value: `base` with `set(config, value)` applied.
    auto add_each = [&](const std::string& group, const SessionConfig& base,
                        const auto& values, auto set) {
      for (const auto v : values) {
        SessionConfig c = base;
        set(c, v);
        add(group, ParamsOf(c), c);
      }
    };
    add_each("affinity", tuned_affinity, lambdas,
             [](SessionConfig& c, double l) { c.affinity.lambda = l; });
    add_each("affinity", tuned_affinity, seed_betas,
             [](SessionConfig& c, double b) {
               c.affinity.update = AffinityUpdate::kSeed;
               c.affinity.beta = b;
             });
    add_each("entropy", tuned_entropy, gammas,
             [](SessionConfig& c, double g) { c.entropy_budget.gamma = g; });
    add_each("h2o", tuned_h2o, fractions,
             [](SessionConfig& c, double f) { c.h2o.recent_fraction = f; });
    add_each("streaming", tuned_streaming, sinks,
             [](SessionConfig& c, int64_t k) { c.streaming_sinks = k; });
    ENTROKV_RETURN_IF_ERROR(run_from(0));
    const Candidate* best_gamma = best("entropy");
    if (best_gamma != nullptr) {
      const size_t first = candidates.size();
      add_each(
          "entropy", best_gamma->curve.config, rates,
          [](SessionConfig& c, double r) { c.entropy_budget.ema_rate = r; });
      ENTROKV_RETURN_IF_ERROR(run_from(first));
    }
    if (const Candidate* b = best("affinity")) tuned_affinity = b->curve.config;
    if (const Candidate* b = best("entropy")) tuned_entropy = b->curve.config;
    if (const Candidate* b = best("h2o")) tuned_h2o = b->curve.config;
    if (const Candidate* b = best("streaming"))
      tuned_streaming = b->curve.config;
    grid_text = absl::StrCat(
        "affinity (on affinity+fixed): logit_ema lambda in {",
        absl::StrJoin(lambdas, ", "), "}",
        seed_betas.empty() ? ""
                           : absl::StrCat(", seed update beta in {",
                                          absl::StrJoin(seed_betas, ", "), "}"),
        " (beta is not searched under logit_ema: scaling every logit by beta "
        "keeps the order); entropy budget (on affinity+entropy, default "
        "affinity): gamma in {",
        absl::StrJoin(gammas, ", "), "} at ema_rate 0.05, then ema_rate in {",
        absl::StrJoin(rates, ", "),
        "} at the best gamma; h2o recent_fraction in {",
        absl::StrJoin(fractions, ", "), "} (h2o+fixed); streaming sinks in {",
        absl::StrJoin(sinks, ", "), "} (streaming+fixed)");
  }
  for (SessionConfig& c : policies) {
    c.affinity = tuned_affinity.affinity;
    c.entropy_budget = tuned_entropy.entropy_budget;
    c.h2o = tuned_h2o.h2o;
    c.streaming_sinks = tuned_streaming.streaming_sinks;
  }
  // The reference first, so that its budgets seed the others' guesses.
  std::stable_partition(
      policies.begin(), policies.end(),
      [](const SessionConfig& c) { return c.ranking == Ranking::kWindow; });
  size_t ref = 0;
  for (size_t i = 0; i < policies.size(); ++i) {
    if (PolicyName(policies[i]) == "window+fixed") ref = i;
  }

  // Test: every policy at every target.
  CurveSearch test_sweep(model, test_stories, decider,
                           /*record_evictions=*/false);
  std::vector<std::unique_ptr<Curve>> curves;
  for (const SessionConfig& c : policies) {
    curves.push_back(std::make_unique<Curve>());
    curves.back()->config = c;
    curves.back()->label = "test";
  }
  std::vector<std::vector<Point>> points(policies.size(),
                                         std::vector<Point>(targets.size()));
  {
    std::vector<std::function<absl::Status()>> tasks;
    for (size_t i = 0; i < policies.size(); ++i) {
      tasks.push_back([&, i]() -> absl::Status {
        for (size_t t = 0; t < targets.size(); ++t) {
          ENTROKV_ASSIGN_OR_RETURN(points[i][t],
                                   calibrate(&test_sweep, curves[i].get(),
                                             static_cast<double>(targets[t])));
        }
        return absl::OkStatus();
      });
    }
    ENTROKV_RETURN_IF_ERROR(RunTasks(std::move(tasks), threads));
  }

  // Paired bootstrap against window+fixed and against the full cache.
  const double level = 0.95;
  std::vector<std::vector<PairedDifference>> vs_ref(
      policies.size(), std::vector<PairedDifference>(targets.size()));
  std::vector<std::vector<PairedDifference>> vs_full = vs_ref;
  for (size_t i = 0; i < policies.size(); ++i) {
    for (size_t t = 0; t < targets.size(); ++t) {
      const Point& p = points[i][t];
      if (!p.ok()) continue;
      vs_full[i][t] = PairedBootstrap(full_test_nll, p.story_nll,
                                      p.story_tokens, resamples, seed, level);
      if (points[ref][t].ok()) {
        vs_ref[i][t] = PairedBootstrap(points[ref][t].story_nll, p.story_nll,
                                       p.story_tokens, resamples, seed, level);
      }
    }
  }

  // Report.
  const std::string ref_name = PolicyName(policies[ref]);
  std::string md = absl::StrCat("\nSplit: ", split_text, "\n", full_text, "\n");
  if (tuning) {
    absl::StrAppend(&md, "\nTuning at mean live ", tune_target,
                    " on the tuning stories. Grid: ", grid_text,
                    ".\n\n| group | policy | parameters | ppl | budget | "
                    "mean live |\n|---|---|---|---:|---:|---:|\n");
    for (const auto& c : candidates) {
      absl::StrAppend(&md, "| ", c->group, " | ", PolicyName(c->curve.config),
                      " | ", c->label, " | ", Num(c->point.ppl, 4), " | ",
                      c->point.Budgets(), " | ", Num(c->point.mean_live, 2),
                      " |\n");
    }
  }
  const std::string tuned_text = absl::StrCat(
      "affinity: ", ParamsOf(tuned_affinity),
      "; entropy budget: gamma=", tuned_entropy.entropy_budget.gamma,
      " ema_rate=", tuned_entropy.entropy_budget.ema_rate,
      "; h2o: recent_fraction=", tuned_h2o.h2o.recent_fraction,
      "; streaming: sinks=", tuned_streaming.streaming_sinks);
  absl::StrAppend(&md, "\nParameters used on the test stories (",
                  tuning ? "tuned" : "core's defaults", "): ", tuned_text,
                  "\n\nTest stories: perplexity at equal mean live entries "
                  "(a run within ",
                  Num(100.0 * tolerance, 1),
                  "% of the target, else the adjacent budgets B, B+1 around "
                  "it interpolated)\n\n| policy |");
  for (int64_t t : targets) absl::StrAppend(&md, " live ", t, " |");
  absl::StrAppend(&md, "\n|---|");
  for (size_t t = 0; t < targets.size(); ++t) absl::StrAppend(&md, "---:|");
  absl::StrAppend(&md, "\n");
  for (size_t i = 0; i < policies.size(); ++i) {
    absl::StrAppend(&md, "| ", PolicyName(policies[i]), " |");
    for (size_t t = 0; t < targets.size(); ++t) {
      absl::StrAppend(&md, " ", Num(points[i][t].ppl, 3), " |");
    }
    absl::StrAppend(&md, "\n");
  }
  absl::StrAppend(&md, "\nPerplexity difference against ", ref_name,
                  " at the same mean live, % [", Num(100 * level, 0),
                  "% paired bootstrap interval over test stories, ", resamples,
                  " resamples, seed ", seed,
                  "]; * = the interval excludes 0\n\n| policy |");
  for (int64_t t : targets) absl::StrAppend(&md, " live ", t, " |");
  absl::StrAppend(&md, "\n|---|");
  for (size_t t = 0; t < targets.size(); ++t) absl::StrAppend(&md, "---:|");
  absl::StrAppend(&md, "\n");
  for (size_t i = 0; i < policies.size(); ++i) {
    if (i == ref) continue;
    absl::StrAppend(&md, "| ", PolicyName(policies[i]), " |");
    for (size_t t = 0; t < targets.size(); ++t) {
      absl::StrAppend(&md, " ",
                      points[i][t].ok() && points[ref][t].ok()
                          ? DiffCell(vs_ref[i][t])
                          : "—",
                      " |");
    }
    absl::StrAppend(&md, "\n");
  }
  absl::StrAppend(&md, "\nVerdict against ", ref_name,
                  " on the test stories:\n");
  for (size_t t = 0; t < targets.size(); ++t) {
    std::vector<std::string> better, worse, tied;
    for (size_t i = 0; i < policies.size(); ++i) {
      if (i == ref || !points[i][t].ok() || !points[ref][t].ok()) continue;
      const PairedDifference& d = vs_ref[i][t];
      const std::string name = PolicyName(policies[i]);
      (d.hi_pct < 0 ? better : d.lo_pct > 0 ? worse : tied).push_back(name);
    }
    absl::StrAppend(&md, "- live ", targets[t], ": significantly better: ",
                    better.empty() ? "none" : absl::StrJoin(better, ", "),
                    "; significantly worse: ",
                    worse.empty() ? "none" : absl::StrJoin(worse, ", "),
                    "; not distinguishable: ",
                    tied.empty() ? "none" : absl::StrJoin(tied, ", "), "\n");
  }
  absl::StrAppend(&md,
                  "\nCalibration on the test stories: budget (mean live / "
                  "peak live)\n\n| policy |");
  for (int64_t t : targets) absl::StrAppend(&md, " live ", t, " |");
  absl::StrAppend(&md, "\n|---|");
  for (size_t t = 0; t < targets.size(); ++t) absl::StrAppend(&md, "---|");
  absl::StrAppend(&md, "\n");
  int64_t test_runs = 0;
  for (size_t i = 0; i < policies.size(); ++i) {
    test_runs += static_cast<int64_t>(curves[i]->runs.size());
    absl::StrAppend(&md, "| ", PolicyName(policies[i]), " |");
    for (size_t t = 0; t < targets.size(); ++t) {
      const Point& p = points[i][t];
      absl::StrAppend(&md, " ", p.Budgets(), " (", Num(p.mean_live, 2), " / ",
                      p.peak_live, ") |");
    }
    absl::StrAppend(&md, "\n");
  }
  int64_t tune_runs = 0;
  for (const auto& c : candidates) {
    tune_runs += static_cast<int64_t>(c->curve.runs.size());
  }
  absl::StrAppend(&md, "\n", tune_runs, " runs of ", split.tune.size(),
                  " tuning stories, ", test_runs, " runs of ",
                  split.test.size(), " test stories\n");
  std::printf("%s", md.c_str());

  const std::filesystem::path out_dir = absl::GetFlag(FLAGS_out);
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create '", out_dir.string(), "': ", error.message()));
  }
  ENTROKV_RETURN_IF_ERROR(WriteFile(out_dir / "tinystories_report.md", md));

  // CSV: one row per policy and target on the test stories, then every run.
  std::string csv =
      "split,policy,parameters,target_mean_live,budgets,mean_live,peak_live,"
      "perplexity,pct_over_full,pct_over_full_lo,pct_over_full_hi,"
      "diff_vs_reference_pct,diff_lo,diff_hi,significant\n";
  for (size_t i = 0; i < policies.size(); ++i) {
    for (size_t t = 0; t < targets.size(); ++t) {
      const Point& p = points[i][t];
      const PairedDifference& f = vs_full[i][t];
      const PairedDifference& d = vs_ref[i][t];
      absl::StrAppend(&csv, "test,", PolicyName(policies[i]), ",\"",
                      ParamsOf(policies[i]), "\",", targets[t], ",",
                      p.Budgets(), ",", Num(p.mean_live, 3), ",", p.peak_live,
                      ",", Num(p.ppl, 5), ",", Num(f.pct, 3), ",",
                      Num(f.lo_pct, 3), ",", Num(f.hi_pct, 3), ",",
                      Num(d.pct, 3), ",", Num(d.lo_pct, 3), ",",
                      Num(d.hi_pct, 3), ",", d.significant() ? 1 : 0, "\n");
    }
  }
  for (const auto& c : candidates) {
    absl::StrAppend(&csv, "tune,", PolicyName(c->curve.config), ",\"", c->label,
                    "\",", tune_target, ",", c->point.Budgets(), ",",
                    Num(c->point.mean_live, 3), ",", c->point.peak_live, ",",
                    Num(c->point.ppl, 5), ",,,,,,,\n");
  }
  ENTROKV_RETURN_IF_ERROR(WriteFile(out_dir / "tinystories_protocol.csv", csv));
  std::string runs_csv =
      "split,policy,parameters,budget,nll,perplexity,mean_live,peak_live,"
      "seconds\n";
  auto run_rows = [&](const char* which, const Curve& curve) {
    for (const auto& [b, r] : curve.runs) {
      absl::StrAppend(&runs_csv, which, ",", r.policy, ",\"",
                      ParamsOf(r.config), "\",", b, ",",
                      Num(r.nll_sum / r.predicted, 6), ",", Num(r.ppl(), 5),
                      ",", Num(r.mean_live(), 3), ",", r.peak_live, ",",
                      Num(r.seconds, 2), "\n");
    }
  };
  for (const auto& c : candidates) run_rows("tune", c->curve);
  for (const auto& c : curves) run_rows("test", *c);
  ENTROKV_RETURN_IF_ERROR(
      WriteFile(out_dir / "tinystories_runs.csv", runs_csv));

  // JSON.
  auto ints = [](const std::vector<int>& v) {
    std::vector<int> one;
    for (int i : v) one.push_back(i + 1);
    return absl::StrCat("[", absl::StrJoin(one, ", "), "]");
  };
  std::string json = absl::StrCat(
      "{\n  \"data\": ", JsonString(data_dir),
      ",\n  \"decider\": ", JsonString(decider->Describe()),
      ",\n  \"stories\": ", stories.size(),
      ",\n  \"split\": {\"tune\": ", ints(split.tune),
      ", \"test\": ", ints(split.test), ", \"tune_tokens\": ", tune_tokens,
      ", \"test_tokens\": ", test_tokens,
      ", \"numbering\": \"1-based story index in tinystories_valid_head.txt\"},"
      "\n  \"full_cache\": {\"perplexity_all\": ",
      Num(full.ppl()), ", \"perplexity_tune\": ", Num(full_tune_ppl),
      ", \"perplexity_test\": ", Num(full_test_ppl),
      ", \"mean_live\": ", Num(full.mean_live(), 2),
      ", \"peak_live\": ", full.peak_live,
      "},\n  \"calibration\": {\"tolerance_fraction\": ", tolerance,
      ", \"method\": \"budget search (secant, then bisection) on the integer "
      "nominal budget; a run within the tolerance of the target is used as "
      "is, else the adjacent budgets B, B+1 bracketing the target are "
      "interpolated (per-story NLL, i.e. log-perplexity, linear in mean "
      "live)\"},\n  \"bootstrap\": {\"resamples\": ",
      resamples, ", \"seed\": ", seed, ", \"level\": ", level,
      ", \"reference\": ", JsonString(ref_name),
      "},\n  \"tuning\": {\"enabled\": ", tuning ? "true" : "false",
      ", \"target_mean_live\": ", tune_target,
      ", \"grid\": ", JsonString(grid_text), ", \"candidates\": [");
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = *candidates[i];
    absl::StrAppend(&json, i ? "," : "",
                    "\n    {\"group\": ", JsonString(c.group),
                    ", \"policy\": ", JsonString(PolicyName(c.curve.config)),
                    ", \"parameters\": ", JsonString(c.label),
                    ", \"perplexity\": ", Num(c.point.ppl),
                    ", \"budgets\": ", JsonString(c.point.Budgets()),
                    ", \"mean_live\": ", Num(c.point.mean_live, 3), "}");
  }
  absl::StrAppend(
      &json, "],\n    \"tuned\": {\"affinity_update\": ",
      JsonString(
          std::string(AffinityUpdateName(tuned_affinity.affinity.update))),
      ", \"affinity_beta\": ", tuned_affinity.affinity.beta,
      ", \"affinity_lambda\": ", tuned_affinity.affinity.lambda,
      ", \"entropy_gamma\": ", tuned_entropy.entropy_budget.gamma,
      ", \"entropy_ema_rate\": ", tuned_entropy.entropy_budget.ema_rate,
      ", \"h2o_recent_fraction\": ", tuned_h2o.h2o.recent_fraction,
      ", \"streaming_sinks\": ", tuned_streaming.streaming_sinks,
      "}},\n  \"targets\": [", absl::StrJoin(targets, ", "),
      "],\n  \"test\": [");
  for (size_t i = 0; i < policies.size(); ++i) {
    absl::StrAppend(&json, i ? "," : "",
                    "\n    {\"policy\": ", JsonString(PolicyName(policies[i])),
                    ", \"parameters\": ", JsonString(ParamsOf(policies[i])),
                    ", \"points\": [");
    for (size_t t = 0; t < targets.size(); ++t) {
      const Point& p = points[i][t];
      const PairedDifference& f = vs_full[i][t];
      const PairedDifference& d = vs_ref[i][t];
      absl::StrAppend(
          &json, t ? ", " : "", "{\"target\": ", targets[t],
          ", \"budgets\": ", JsonString(p.Budgets()),
          ", \"mean_live\": ", Num(p.mean_live, 3),
          ", \"peak_live\": ", p.peak_live, ", \"perplexity\": ", Num(p.ppl),
          ", \"pct_over_full\": [", Num(f.pct, 3), ", ", Num(f.lo_pct, 3), ", ",
          Num(f.hi_pct, 3), "], \"diff_vs_reference_pct\": [", Num(d.pct, 3),
          ", ", Num(d.lo_pct, 3), ", ", Num(d.hi_pct, 3),
          "], \"significant\": ", d.significant() ? "true" : "false", "}");
    }
    absl::StrAppend(&json, "]}");
  }
  absl::StrAppend(&json, "\n  ]\n}\n");
  ENTROKV_RETURN_IF_ERROR(
      WriteFile(out_dir / "tinystories_results.json", json));

  if (absl::GetFlag(FLAGS_plot)) {
    ENTROKV_RETURN_IF_ERROR(PlotProtocol(out_dir, policies, targets, points,
                                         vs_full, vs_ref, ref,
                                         split.test.size(), full_test_ppl));
  }
  std::printf(
      "\nwrote %s/tinystories_report.md, tinystories_protocol.csv, "
      "tinystories_runs.csv, tinystories_results.json%s\n",
      out_dir.string().c_str(),
      absl::GetFlag(FLAGS_plot) ? ", tinystories_ppl_vs_live.png" : "");
  return absl::OkStatus();
}

absl::Status Main() {
  std::unique_ptr<EvalProgress> shown;
  if (absl::GetFlag(FLAGS_progress)) shown = EvalProgress::OnStderr();
  SetEvalProgress(shown.get());
  struct EndLine {
    EvalProgress* progress;
    ~EndLine() {
      if (progress != nullptr) progress->Finish();
      SetEvalProgress(nullptr);
    }
  } end_line{shown.get()};
  const std::string data_dir = ResolveDataDir(absl::GetFlag(FLAGS_data));
  absl::StatusOr<Model> loaded = Model::Load(ModelPath(data_dir));
  if (!loaded.ok()) return BadInput(loaded.status());
  Model model = *std::move(loaded);
  absl::StatusOr<Tokenizer> loaded_tokenizer =
      Tokenizer::Load(TokenizerPath(data_dir), model.config().vocab_size);
  if (!loaded_tokenizer.ok()) return BadInput(loaded_tokenizer.status());
  Tokenizer tokenizer = *std::move(loaded_tokenizer);
  const bool protocol =
      !absl::GetFlag(FLAGS_sweep) && !absl::GetFlag(FLAGS_fidelity);
  int max_stories = absl::GetFlag(FLAGS_stories);
  if (max_stories == 0 && !protocol) max_stories = 20;
  if (max_stories == 0 && absl::GetFlag(FLAGS_quick)) max_stories = 16;
  absl::StatusOr<std::vector<std::string>> texts =
      LoadStories(StoriesPath(data_dir), max_stories);
  if (!texts.ok()) return BadInput(texts.status());
  std::vector<std::vector<int>> stories;
  int64_t tokens = 0;
  for (const std::string& text : *texts) {
    stories.push_back(StoryTokens(tokenizer, text, model.config().seq_len));
    tokens += stories.back().size();
  }
  ENTROKV_ASSIGN_OR_RETURN(std::vector<int64_t> budgets,
                           ParseList(absl::GetFlag(FLAGS_budgets), "budgets"));
  ENTROKV_ASSIGN_OR_RETURN(
      std::vector<int64_t> targets,
      ParseList(absl::GetFlag(FLAGS_quick) ? std::string("32,64")
                                           : absl::GetFlag(FLAGS_targets),
                "targets"));
  ENTROKV_ASSIGN_OR_RETURN(
      std::vector<int64_t> pipelined,
      ParseList(absl::GetFlag(FLAGS_pipelined_budgets), "pipelined_budgets"));
  absl::StatusOr<std::vector<PolicyPair>> named_pairs =
      Policies(model.config(), absl::GetFlag(FLAGS_policies));
  if (!named_pairs.ok()) return BadInput(named_pairs.status());
  const std::vector<PolicyPair> pairs = *std::move(named_pairs);
  std::vector<SessionConfig> policies;
  for (const PolicyPair& pair : pairs) policies.push_back(pair.variant);

  std::unique_ptr<Decider> decider;
  if (absl::GetFlag(FLAGS_inprocess)) {
    ENTROKV_ASSIGN_OR_RETURN(decider, CreateInProcessDecider());
  } else {
#ifdef ENTROKV_TINYLLAMA_HAVE_CLIENT
    ENTROKV_ASSIGN_OR_RETURN(decider,
                             CreateGrpcDecider(absl::GetFlag(FLAGS_server)));
#else
    return absl::UnimplementedError(
        "this entrokv-eval was built without the client library: pass "
        "--inprocess");
#endif
  }
  std::printf("data %s: %zu stories, %lld tokens; decider %s; variant %s\n",
              data_dir.c_str(), stories.size(), static_cast<long long>(tokens),
              decider->Describe().c_str(), VariantLabel(policies[0]).c_str());

  if (protocol) {
    return Protocol(model, stories, decider.get(), data_dir, policies, targets);
  }

  Run full;
  full.policy = "full";
  ENTROKV_RETURN_IF_ERROR(Evaluate(model, stories, nullptr, &full));
  std::printf("full cache: ppl %.4f (nll %.6f), mean live %.1f, peak %lld\n",
              full.ppl(), full.nll_sum / full.predicted, full.mean_live(),
              static_cast<long long>(full.peak_live));

  if (absl::GetFlag(FLAGS_fidelity)) {
    const std::filesystem::path out_dir = absl::GetFlag(FLAGS_out);
    std::error_code error;
    std::filesystem::create_directories(out_dir, error);
    if (error) {
      return absl::UnavailableError(absl::StrCat(
          "cannot create '", out_dir.string(), "': ", error.message()));
    }
    return Fidelity(model, stories, decider.get(), pairs, targets, out_dir);
  }

  std::vector<Run> runs;
  for (const SessionConfig& policy : policies) {
    for (int64_t budget : budgets) {
      for (int lag : {0, 1}) {
        if (lag == 1 &&
            !std::binary_search(pipelined.begin(), pipelined.end(), budget)) {
          continue;
        }
        Run run;
        run.config = policy;
        run.config.budget = budget;
        run.policy = PolicyName(run.config);
        run.variant = VariantLabel(run.config);
        run.lag = lag;
        runs.push_back(run);
      }
    }
  }

  // Runs are independent: each worker takes the next one.
  std::atomic<size_t> next{0};
  std::mutex mu;
  absl::Status failure;
  auto worker = [&]() {
    for (size_t i = next++; i < runs.size(); i = next++) {
      absl::Status status = Evaluate(model, stories, decider.get(), &runs[i]);
      std::lock_guard<std::mutex> lock(mu);
      if (!status.ok()) {
        if (failure.ok()) {
          failure = absl::Status(
              status.code(),
              absl::StrCat(runs[i].policy, " B=", runs[i].config.budget, ": ",
                           status.message()));
        }
        next = runs.size();
        return;
      }
      std::printf(
          "%-20s B=%-4lld lag %d: ppl %8.4f  mean live %6.1f  "
          "peak %4lld  (%.1fs)\n",
          runs[i].policy.c_str(), static_cast<long long>(runs[i].config.budget),
          runs[i].lag, runs[i].ppl(), runs[i].mean_live(),
          static_cast<long long>(runs[i].peak_live), runs[i].seconds);
      std::fflush(stdout);
    }
  };
  const int threads = std::max(1, absl::GetFlag(FLAGS_threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  ENTROKV_RETURN_IF_ERROR(failure);

  // Equal mean live: one row per policy, one column per target.
  std::vector<std::string> policy_names;
  std::map<std::string, std::vector<const Run*>> immediate;
  for (const Run& run : runs) {
    if (run.lag != 0) continue;
    if (immediate.find(run.policy) == immediate.end()) {
      policy_names.push_back(run.policy);
    }
    immediate[run.policy].push_back(&run);
  }

  const std::filesystem::path out_dir = absl::GetFlag(FLAGS_out);
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create '", out_dir.string(), "': ", error.message()));
  }

  // CSV: every run.
  std::string csv =
      "policy,ranking,budget_control,budget,lag,stories,tokens_scored,nll,"
      "perplexity,ppl_increase_pct,mean_live,peak_live,evicted,seconds,"
      "variant\n";
  auto csv_row = [&](const Run& r, const std::string& ranking,
                     const std::string& control) {
    absl::StrAppend(&csv, r.policy, ",", ranking, ",", control, ",",
                    r.config.budget, ",", r.lag, ",", stories.size(), ",",
                    r.predicted, ",", Num(r.nll_sum / r.predicted, 6), ",",
                    Num(r.ppl()), ",",
                    Num(100.0 * (r.ppl() / full.ppl() - 1.0), 2), ",",
                    Num(r.mean_live(), 2), ",", r.peak_live, ",", r.evicted,
                    ",", Num(r.seconds, 2), ",\"", r.variant, "\"\n");
  };
  full.config.budget = 0;
  full.variant = "full";
  csv_row(full, "full", "none");
  for (const Run& r : runs) {
    csv_row(r, std::string(RankingName(r.config.ranking)),
            std::string(BudgetControlName(r.config.budget_control)));
  }
  ENTROKV_RETURN_IF_ERROR(WriteFile(out_dir / "tinystories_runs.csv", csv));

  // Markdown tables to stdout, JSON to a file.
  std::string md = absl::StrCat(
      "\nPerplexity at equal mean live entries (log-ppl interpolated in mean "
      "live between measured budgets; full cache ",
      Num(full.ppl()), ", mean live ", Num(full.mean_live(), 1), ")\n\n",
      "| policy |");
  for (int64_t t : targets) absl::StrAppend(&md, " live ", t, " |");
  absl::StrAppend(&md, "\n|---|");
  for (size_t i = 0; i < targets.size(); ++i) absl::StrAppend(&md, "---:|");
  absl::StrAppend(&md, "\n");
  std::string json_equal;
  for (const std::string& name : policy_names) {
    absl::StrAppend(&md, "| ", name, " |");
    absl::StrAppend(&json_equal, json_equal.empty() ? "" : ",\n",
                    "    {\"policy\": \"", name, "\", \"perplexity\": [");
    for (size_t i = 0; i < targets.size(); ++i) {
      const double ppl =
          PplAtMeanLive(immediate[name], static_cast<double>(targets[i]));
      absl::StrAppend(&md, " ", std::isfinite(ppl) ? Num(ppl, 3) : "—", " |");
      absl::StrAppend(&json_equal, i ? ", " : "", Num(ppl));
    }
    absl::StrAppend(&md, "\n");
    absl::StrAppend(&json_equal, "]}");
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
  std::printf("%s", md.c_str());

  std::string json = absl::StrCat(
      "{\n  \"data\": \"", data_dir, "\",\n  \"decider\": \"",
      decider->Describe(), "\",\n  \"stories\": ", stories.size(),
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
  absl::StrAppend(&json, "  ],\n  \"equal_mean_live\": {\n    \"method\": ",
                  "\"log-perplexity interpolated linearly in mean live "
                  "entries between the two measured budgets around each "
                  "target; null outside the measured range\",\n    "
                  "\"targets\": [",
                  absl::StrJoin(targets, ", "), "],\n    \"policies\": [\n",
                  json_equal, "\n    ]\n  }\n}\n");
  ENTROKV_RETURN_IF_ERROR(
      WriteFile(out_dir / "tinystories_results.json", json));

  if (absl::GetFlag(FLAGS_plot)) {
    // One data block per policy (immediate mode), sorted by mean live.
    std::string dat;
    std::string plot = absl::StrCat(
        "set terminal pngcairo size 1000,650 font 'sans,10'\n"
        "set output '",
        (out_dir / "tinystories_ppl_vs_live.png").string(),
        "'\nset title 'stories260K on ", stories.size(),
        " TinyStories stories: perplexity vs mean live KV entries'\n"
        "set xlabel 'mean live entries per decode step'\n"
        "set ylabel 'perplexity (log scale)'\nset logscale y\n"
        "set key outside right\nset grid\n"
        "set yrange [",
        Num(0.97 * full.ppl(), 3),
        ":*]\n"
        "plot ");
    int index = 0;
    for (const std::string& name : policy_names) {
      std::vector<const Run*> points = immediate[name];
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
    ENTROKV_RETURN_IF_ERROR(
        WriteFile(out_dir / "tinystories_ppl_vs_live.dat", dat));
    ENTROKV_RETURN_IF_ERROR(
        WriteFile(out_dir / "tinystories_ppl_vs_live.gp", plot));
    const std::string command = absl::StrCat(
        "gnuplot '", (out_dir / "tinystories_ppl_vs_live.gp").string(), "'");
    if (std::system(command.c_str()) != 0) {
      std::fprintf(stderr, "gnuplot failed; the data and script are in %s\n",
                   out_dir.string().c_str());
    }
  }
  std::printf("\nwrote %s/tinystories_runs.csv, tinystories_results.json%s\n",
              out_dir.string().c_str(),
              absl::GetFlag(FLAGS_plot) ? ", tinystories_ppl_vs_live.png" : "");
  return absl::OkStatus();
}

}  // namespace
}  // namespace entrokv::tinyllama

int main(int argc, char** argv) {
  entrokv::ParseFlags(argc, argv, entrokv::tinyllama::EvalProgramInfo());
  if (absl::Status status = entrokv::InitLogging(); !status.ok()) {
    std::fprintf(stderr, "entrokv-eval: %s\n",
                 std::string(status.message()).c_str());
    return 2;
  }
  const absl::Status status = entrokv::tinyllama::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "entrokv-eval: %s: %s\n",
                 absl::StatusCodeToString(status.code()).c_str(),
                 std::string(status.message()).c_str());
    return entrokv::tinyllama::IsBadInput(status) ? 2 : 1;
  }
  return 0;
}
