#include "tinyllama/eval_protocol.h"

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
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "entrokv/core/status_macros.h"
#include "tinyllama/eval_flags.h"
#include "tinyllama/eval_output.h"
#include "tinyllama/eval_policies.h"
#include "tinyllama/eval_protocol_compare.h"
#include "tinyllama/eval_protocol_report.h"
#include "tinyllama/evaluator.h"

namespace entrokv::tinyllama {
namespace {

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

// Calibrates curves to a target within the protocol's tolerance, the first
// guess from the hints, which every point found teaches (tuning and test
// alike). Thread-safe.
class Calibrator {
 public:
  explicit Calibrator(double tolerance) : tolerance_(tolerance) {}
  absl::StatusOr<Point> operator()(CurveSearch* sweep, Curve* curve,
                                   double target) {
    ENTROKV_ASSIGN_OR_RETURN(
        Point p, sweep->Calibrate(curve, target, tolerance_ * target,
                                  hints_.Guess(curve->config, target)));
    hints_.Learn(curve->config, p, target);
    return p;
  }

 private:
  const double tolerance_;
  BudgetHints hints_;
};

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

void SettingsFromFlags(const std::vector<int64_t>& targets, ProtocolResult* r) {
  r->quick = absl::GetFlag(FLAGS_quick);
  r->threads = absl::GetFlag(FLAGS_threads);
  r->tolerance = absl::GetFlag(FLAGS_tolerance);
  r->resamples = r->quick ? 200 : absl::GetFlag(FLAGS_bootstrap);
  r->seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  r->tune_target = absl::GetFlag(FLAGS_tune_target);
  r->targets = targets;
  r->long_window = absl::GetFlag(FLAGS_longppl_window);
  r->key_params.alpha = absl::GetFlag(FLAGS_longppl_alpha);
  r->key_params.beta = absl::GetFlag(FLAGS_longppl_beta);
  r->equal_peak = absl::GetFlag(FLAGS_equal_peak);
}

// The split (printed), the stories of each side, and the full cache on every
// story (printed). Bad input when no test story is left.
absl::Status SplitAndFullCache(const Model& model,
                               const std::vector<std::vector<int>>& stories,
                               ProtocolResult* r,
                               std::vector<std::vector<int>>* tune_stories,
                               std::vector<std::vector<int>>* test_stories) {
  const StorySplit split =
      r->quick
          ? SplitStories(static_cast<int>(stories.size()), 8, 8)
          : SplitStories(static_cast<int>(stories.size()),
                         absl::GetFlag(FLAGS_tune), absl::GetFlag(FLAGS_test));
  if (split.test.empty()) {
    return BadInput(absl::InvalidArgumentError(
        absl::StrCat("no test stories: ", stories.size(),
                     " stories read, --tune ", absl::GetFlag(FLAGS_tune))));
  }
  r->split = split;
  for (int i : split.tune) {
    tune_stories->push_back(stories[i]);
    r->tune_tokens += static_cast<int64_t>(stories[i].size()) - 1;
  }
  for (int i : split.test) {
    test_stories->push_back(stories[i]);
    r->test_tokens += static_cast<int64_t>(stories[i].size()) - 1;
  }
  auto range = [](const std::vector<int>& v) -> std::string {
    if (v.empty()) return "none";
    return absl::StrCat(v.front() + 1, "–", v.back() + 1);
  };
  r->split_text = absl::StrCat(
      "tune: stories ", range(split.tune), " (", split.tune.size(),
      " stories, ", r->tune_tokens, " scored tokens); test: stories ",
      range(split.test), " (", split.test.size(), " stories, ", r->test_tokens,
      " scored tokens); disjoint; numbered from 1 in "
      "tinystories_valid_head.txt");
  std::printf("split: %s\n", r->split_text.c_str());

  Run& full = r->full;
  full.policy = "full";
  full.keep_token_nll = r->long_window > 0;  // For the key tokens.
  ENTROKV_RETURN_IF_ERROR(Evaluate(model, stories, nullptr, &full));
  r->full_test_ppl = SubsetPpl(full, split.test);
  r->full_tune_ppl = SubsetPpl(full, split.tune);
  r->full_text = absl::StrFormat(
      "full cache: ppl %.4f on all %zu stories (mean live %.1f, peak %lld); "
      "tune split %.4f; test split %.4f",
      full.ppl(), stories.size(), full.mean_live(),
      static_cast<long long>(full.peak_live), r->full_tune_ppl,
      r->full_test_ppl);
  std::printf("%s\n", r->full_text.c_str());
  return absl::OkStatus();
}

// The parameter values tried while tuning, per group.
struct TuningGrid {
  std::vector<double> lambdas;     // affinity (logit_ema) lambda.
  std::vector<double> seed_betas;  // affinity seed update beta.
  std::vector<double> gammas;      // entropy budget gamma.
  std::vector<double> rates;       // entropy budget EMA rate.
  std::vector<double> fractions;   // h2o recent_fraction.
  std::vector<int64_t> sinks;      // streaming sinks.
  std::vector<double> expected_rates;  // expected ema_rate.
  std::vector<double> birth_weights;   // birth weight η.
  std::vector<double> rkv_lambdas;     // rkv λ.
};

TuningGrid MakeGrid(bool quick) {
  TuningGrid g;
  g.lambdas = quick ? std::vector<double>{0.9, 0.97}
                    : std::vector<double>{0.9, 0.7, 0.97, 0.99};
  g.seed_betas = quick ? std::vector<double>{} : std::vector<double>{1.0, 4.0};
  g.gammas = quick ? std::vector<double>{0.5, 0.25}
                   : std::vector<double>{0.5, 0.25, 0.75};
  g.rates = quick ? std::vector<double>{0.2} : std::vector<double>{0.01, 0.2};
  g.fractions = quick ? std::vector<double>{0.5, 0.25}
                      : std::vector<double>{0.5, 0.25, 0.75};
  g.sinks = quick ? std::vector<int64_t>{4, 1} : std::vector<int64_t>{4, 1, 16};
  g.expected_rates = quick ? std::vector<double>{0.05, 0.3}
                           : std::vector<double>{0.05, 0.01, 0.2, 0.5};
  g.birth_weights = quick ? std::vector<double>{1.0, 0.25}
                          : std::vector<double>{1.0, 0.25, 0.5, 2.0};
  g.rkv_lambdas = quick ? std::vector<double>{0.1, 0.5}
                        : std::vector<double>{0.1, 0.3, 0.6, 0.9};
  return g;
}

std::string GridText(const TuningGrid& g) {
  return absl::StrCat(
      "affinity (on affinity+fixed): logit_ema lambda in {",
      absl::StrJoin(g.lambdas, ", "), "}",
      g.seed_betas.empty()
          ? ""
          : absl::StrCat(", seed update beta in {",
                         absl::StrJoin(g.seed_betas, ", "), "}"),
      " (beta is not searched under logit_ema: scaling every logit by beta "
      "keeps the order); entropy budget (on affinity+entropy, default "
      "affinity): gamma in {",
      absl::StrJoin(g.gammas, ", "), "} at ema_rate 0.05, then ema_rate in {",
      absl::StrJoin(g.rates, ", "),
      "} at the best gamma; h2o recent_fraction in {",
      absl::StrJoin(g.fractions, ", "), "} (h2o+fixed); streaming sinks in {",
      absl::StrJoin(g.sinks, ", "),
      "} (streaming+fixed); and only when a policy of the ranking is "
      "evaluated: expected ema_rate in {",
      absl::StrJoin(g.expected_rates, ", "), "} (expected+fixed), birth weight "
      "in {", absl::StrJoin(g.birth_weights, ", "), "} (birth+fixed), rkv "
      "lambda in {", absl::StrJoin(g.rkv_lambdas, ", "), "} (rkv+fixed)");
}

// Tuning on the tuning stories at the tuning target. Stage 1: each group's
// first parameter; stage 2: the entropy EMA rate at the best gamma. The
// default comes first in each group and a candidate must be strictly better
// to replace it. Fills r->candidates and r->tuned (from core's defaults).
absl::Status Tune(const Model& model,
                  const std::vector<std::vector<int>>& tune_stories,
                  Decider* decider, const TuningGrid& grid,
                  const std::vector<SessionConfig>& policies,
                  Calibrator* calibrate, ProtocolResult* r) {
  CurveSearch tune_sweep(model, tune_stories, decider,
                         /*record_evictions=*/false);
  std::vector<std::unique_ptr<Candidate>>& candidates = r->candidates;
  auto run_from = [&](size_t first) -> absl::Status {
    std::vector<std::function<absl::Status()>> tasks;
    for (size_t i = first; i < candidates.size(); ++i) {
      tasks.push_back([&, i]() -> absl::Status {
        ENTROKV_ASSIGN_OR_RETURN(
            candidates[i]->point,
            (*calibrate)(&tune_sweep, &candidates[i]->curve, r->tune_target));
        return absl::OkStatus();
      });
    }
    return RunTasks(std::move(tasks), r->threads);
  };
  auto best = [&](const std::string& group) -> const Candidate* {
    const Candidate* b = nullptr;
    for (const auto& c : candidates) {
      if (c->group != group || !c->point.ok()) continue;
      if (b == nullptr || c->point.ppl < b->point.ppl) b = c.get();
    }
    return b;
  };
  // One candidate per value: `base` with `set(config, value)` applied.
  auto add_each = [&](const std::string& group, const SessionConfig& base,
                      const auto& values, auto set) {
    for (const auto v : values) {
      SessionConfig config = base;
      set(config, v);
      auto c = std::make_unique<Candidate>();
      c->group = group;
      c->label = ParamsOf(config);
      c->curve.config = config;
      c->curve.label = absl::StrCat("tune ", c->label);
      candidates.push_back(std::move(c));
    }
  };
  TunedParameters& tuned = r->tuned;
  add_each("affinity", tuned.affinity, grid.lambdas,
           [](SessionConfig& c, double l) { c.affinity.lambda = l; });
  add_each("affinity", tuned.affinity, grid.seed_betas,
           [](SessionConfig& c, double b) {
             c.affinity.update = AffinityUpdate::kSeed;
             c.affinity.beta = b;
           });
  add_each("entropy", tuned.entropy, grid.gammas,
           [](SessionConfig& c, double g) { c.entropy_budget.gamma = g; });
  add_each("h2o", tuned.h2o, grid.fractions,
           [](SessionConfig& c, double f) { c.h2o.recent_fraction = f; });
  add_each("streaming", tuned.streaming, grid.sinks,
           [](SessionConfig& c, int64_t k) { c.streaming_sinks = k; });
  auto evaluated = [&](Ranking ranking) {
    return std::any_of(
        policies.begin(), policies.end(),
        [ranking](const SessionConfig& c) { return c.ranking == ranking; });
  };
  if (evaluated(Ranking::kExpected)) {
    add_each("expected", tuned.expected, grid.expected_rates,
             [](SessionConfig& c, double v) { c.expected.ema_rate = v; });
  }
  if (evaluated(Ranking::kBirth)) {
    add_each("birth", tuned.birth, grid.birth_weights,
             [](SessionConfig& c, double v) { c.birth.weight = v; });
  }
  if (evaluated(Ranking::kRkv)) {
    add_each("rkv", tuned.rkv, grid.rkv_lambdas,
             [](SessionConfig& c, double v) { c.rkv.lambda = v; });
  }
  ENTROKV_RETURN_IF_ERROR(run_from(0));
  if (const Candidate* best_gamma = best("entropy")) {
    const size_t first = candidates.size();
    add_each("entropy", best_gamma->curve.config, grid.rates,
             [](SessionConfig& c, double rate) {
               c.entropy_budget.ema_rate = rate;
             });
    ENTROKV_RETURN_IF_ERROR(run_from(first));
  }
  if (const Candidate* b = best("affinity")) tuned.affinity = b->curve.config;
  if (const Candidate* b = best("entropy")) tuned.entropy = b->curve.config;
  if (const Candidate* b = best("h2o")) tuned.h2o = b->curve.config;
  if (const Candidate* b = best("streaming")) tuned.streaming = b->curve.config;
  if (const Candidate* b = best("expected")) tuned.expected = b->curve.config;
  if (const Candidate* b = best("birth")) tuned.birth = b->curve.config;
  if (const Candidate* b = best("rkv")) tuned.rkv = b->curve.config;
  return absl::OkStatus();
}

// The tuned parameters on every policy, the reference first (so that its
// budgets seed the others' guesses).
void UseTunedParameters(std::vector<SessionConfig> policies,
                        ProtocolResult* r) {
  for (SessionConfig& c : policies) {
    c.affinity = r->tuned.affinity.affinity;
    c.entropy_budget = r->tuned.entropy.entropy_budget;
    c.h2o = r->tuned.h2o.h2o;
    c.streaming_sinks = r->tuned.streaming.streaming_sinks;
    c.expected = r->tuned.expected.expected;
    c.birth = r->tuned.birth.birth;
    c.rkv = r->tuned.rkv.rkv;
  }
  std::stable_partition(
      policies.begin(), policies.end(),
      [](const SessionConfig& c) { return c.ranking == Ranking::kWindow; });
  r->ref = 0;
  for (size_t i = 0; i < policies.size(); ++i) {
    if (PolicyName(policies[i]) == "window+fixed") r->ref = i;
  }
  r->policies = std::move(policies);
}

// Test: every policy at every target, on the test stories.
absl::Status Test(const Model& model,
                  const std::vector<std::vector<int>>& test_stories,
                  Decider* decider, Calibrator* calibrate, ProtocolResult* r) {
  CurveSearch test_sweep(model, test_stories, decider,
                         /*record_evictions=*/false, KeysOf(*r));
  for (const SessionConfig& c : r->policies) {
    r->curves.push_back(std::make_unique<Curve>());
    r->curves.back()->config = c;
    r->curves.back()->label = "test";
  }
  const std::vector<int64_t>& targets = r->targets;
  r->points.assign(r->policies.size(), std::vector<Point>(targets.size()));
  std::vector<std::function<absl::Status()>> tasks;
  for (size_t i = 0; i < r->policies.size(); ++i) {
    tasks.push_back([&, i]() -> absl::Status {
      for (size_t t = 0; t < targets.size(); ++t) {
        ENTROKV_ASSIGN_OR_RETURN(r->points[i][t],
                                 (*calibrate)(&test_sweep, r->curves[i].get(),
                                              static_cast<double>(targets[t])));
      }
      return absl::OkStatus();
    });
  }
  return RunTasks(std::move(tasks), r->threads);
}

// Paired bootstrap of `points` against the reference's (or, with `full`,
// against the full cache's per-story NLL): perplexity, and with `key` the
// NLL of the key tokens (LongPPL).
std::vector<std::vector<PairedDifference>> AgainstReference(
    const ProtocolResult& r, const std::vector<std::vector<Point>>& points,
    bool key, const std::vector<double>* full) {
  std::vector<std::vector<PairedDifference>> out(
      points.size(), std::vector<PairedDifference>(r.targets.size()));
  for (size_t i = 0; i < points.size(); ++i) {
    for (size_t t = 0; t < r.targets.size(); ++t) {
      const Point& p = points[i][t];
      const Point& ref = r.points[r.ref][t];
      if (!p.ok() || (full == nullptr && !ref.ok())) continue;
      const std::vector<double>& base =
          full != nullptr ? *full : (key ? ref.story_key_nll : ref.story_nll);
      out[i][t] = PairedBootstrap(base, key ? p.story_key_nll : p.story_nll,
                                  key ? p.story_key_tokens : p.story_tokens,
                                  r.resamples, r.seed, r.level);
    }
  }
  return out;
}

// Paired bootstraps against window+fixed and against the full cache, in
// perplexity and (with key tokens) LongPPL, at equal mean and equal peak.
void Bootstrap(ProtocolResult* r) {
  std::vector<double> full_test_nll;
  for (int i : r->split.test) full_test_nll.push_back(r->full.story_nll[i]);
  r->vs_ref = AgainstReference(*r, r->points, false, nullptr);
  r->vs_full = AgainstReference(*r, r->points, false, &full_test_nll);
  const bool key = r->key_token_count > 0;
  if (key) {
    r->long_vs_ref = AgainstReference(*r, r->points, true, nullptr);
    r->long_vs_full =
        AgainstReference(*r, r->points, true, &r->full_test_key_nll);
  }
  if (r->equal_peak) {
    r->peak_vs_ref = AgainstReference(*r, r->peak_points, false, nullptr);
    r->peak_vs_full =
        AgainstReference(*r, r->peak_points, false, &full_test_nll);
    if (key) {
      r->peak_long_vs_ref = AgainstReference(*r, r->peak_points, true, nullptr);
    }
  }
}

// --recall: each measure's rank agreement with perplexity over the points of
// every policy, and of the competitive ones.
void RecallAgreement(ProtocolResult* r) {
  for (bool competitive_only : {false, true}) {
    std::vector<MeasureAgreement>& out =
        competitive_only ? r->recall_agreement_competitive
                         : r->recall_agreement;
    for (const RecallMeasure& m : RecallMeasures()) {
      std::vector<RankedRun> runs;
      for (size_t i = 0; i < r->policies.size(); ++i) {
        if (competitive_only && !Competitive(r->policies[i])) continue;
        for (size_t t = 0; t < r->targets.size(); ++t) {
          const Point& p = r->points[i][t];
          if (!p.ok()) continue;
          RankedRun run;
          run.group = static_cast<int>(t);
          run.nll = p.story_nll;
          run.tokens = p.story_tokens;
          for (const StoryRecall& s : p.story_recall) {
            run.num.push_back(m.num(s));
            run.den.push_back(m.den(s));
          }
          runs.push_back(std::move(run));
        }
      }
      if (runs.empty()) break;
      out.push_back(
          RankAgreementBootstrap(runs, r->resamples, r->seed, r->level));
    }
  }
}

}  // namespace

bool Competitive(const SessionConfig& config) {
  return config.ranking != Ranking::kKeyNorm &&
         config.ranking != Ranking::kRandom;
}

const std::vector<RecallMeasure>& RecallMeasures() {
  static const std::vector<RecallMeasure> measures = {
      {"mean recall",
       "attention recall averaged over the scored steps",
       [](const StoryRecall& s) { return s.sum; },
       [](const StoryRecall& s) { return s.steps; }},
      {"mean log recall",
       "ln recall averaged over the scored steps (weighs the worst steps "
       "more)",
       [](const StoryRecall& s) { return s.log_sum; },
       [](const StoryRecall& s) { return s.steps; }},
      {"recall / oracle",
       "Σ recall over Σ the oracle's recall at the same budgets",
       [](const StoryRecall& s) { return s.sum; },
       [](const StoryRecall& s) { return s.oracle_sum; }},
  };
  return measures;
}

absl::Status Protocol(const Model& model,
                      const std::vector<std::vector<int>>& stories,
                      Decider* decider, const std::string& data_dir,
                      std::vector<SessionConfig> policies,
                      const std::vector<int64_t>& targets) {
  ProtocolResult r;
  SettingsFromFlags(targets, &r);
  r.data_dir = data_dir;
  r.decider = decider->Describe();
  r.stories = stories.size();
  if (r.long_window < 0) {
    return BadInput(absl::InvalidArgumentError(
        absl::StrCat("--longppl_window: ", r.long_window, " is negative")));
  }
  std::vector<std::vector<int>> tune_stories, test_stories;
  ENTROKV_RETURN_IF_ERROR(
      SplitAndFullCache(model, stories, &r, &tune_stories, &test_stories));
  if (r.long_window > 0) {
    ENTROKV_RETURN_IF_ERROR(KeyTokens(model, test_stories, decider, &r));
  }

  auto named = [&](const std::string& name) -> absl::StatusOr<SessionConfig> {
    SessionConfig config = EngineSessionConfig(model.config(), 1);
    ENTROKV_RETURN_IF_ERROR(ApplyPolicyName(name, &config));
    ENTROKV_RETURN_IF_ERROR(ApplyVariant(model.config(), &config));
    return config;
  };
  ENTROKV_ASSIGN_OR_RETURN(r.tuned.affinity, named("affinity+fixed"));
  ENTROKV_ASSIGN_OR_RETURN(r.tuned.entropy, named("affinity+entropy"));
  ENTROKV_ASSIGN_OR_RETURN(r.tuned.h2o, named("h2o+fixed"));
  ENTROKV_ASSIGN_OR_RETURN(r.tuned.streaming, named("streaming+fixed"));
  ENTROKV_ASSIGN_OR_RETURN(r.tuned.expected, named("expected+fixed"));
  ENTROKV_ASSIGN_OR_RETURN(r.tuned.birth, named("birth+fixed"));
  ENTROKV_ASSIGN_OR_RETURN(r.tuned.rkv, named("rkv+fixed"));
  Calibrator calibrate(r.tolerance);
  r.tuning = absl::GetFlag(FLAGS_tuning) && !r.split.tune.empty();
  if (r.tuning) {
    const TuningGrid grid = MakeGrid(r.quick);
    ENTROKV_RETURN_IF_ERROR(
        Tune(model, tune_stories, decider, grid, policies, &calibrate, &r));
    r.grid_text = GridText(grid);
  }
  UseTunedParameters(std::move(policies), &r);
  ENTROKV_RETURN_IF_ERROR(Test(model, test_stories, decider, &calibrate, &r));
  if (r.equal_peak) {
    ENTROKV_RETURN_IF_ERROR(EqualPeak(model, test_stories, decider, &r));
  }
  Bootstrap(&r);
  r.recall = absl::GetFlag(FLAGS_recall);
  if (r.recall) RecallAgreement(&r);

  const std::string md = ProtocolReport(r);
  std::printf("%s", md.c_str());
  const std::filesystem::path out_dir = absl::GetFlag(FLAGS_out);
  ENTROKV_RETURN_IF_ERROR(CreateOutputDir(out_dir));
  ENTROKV_RETURN_IF_ERROR(WriteFile(out_dir / "tinystories_report.md", md));
  ENTROKV_RETURN_IF_ERROR(
      WriteFile(out_dir / "tinystories_protocol.csv", ProtocolCsv(r)));
  ENTROKV_RETURN_IF_ERROR(
      WriteFile(out_dir / "tinystories_runs.csv", ProtocolRunsCsv(r)));
  ENTROKV_RETURN_IF_ERROR(
      WriteFile(out_dir / "tinystories_results.json", ProtocolJson(r)));
  if (absl::GetFlag(FLAGS_plot)) {
    ENTROKV_RETURN_IF_ERROR(PlotProtocol(out_dir, r));
  }
  std::printf(
      "\nwrote %s/tinystories_report.md, tinystories_protocol.csv, "
      "tinystories_runs.csv, tinystories_results.json%s\n",
      out_dir.string().c_str(),
      absl::GetFlag(FLAGS_plot) ? ", tinystories_ppl_vs_live.png" : "");
  return absl::OkStatus();
}

}  // namespace entrokv::tinyllama
