// entrokv-eval: perplexity of stories260K on TinyStories against KV-cache
// memory, for every entrokv policy (ranking × budget controller).
//
// For each policy and nominal budget the example engine evaluates the first
// --stories stories teacher-forced, with entrokv deciding evictions at every
// decode step (in process, or over gRPC through the client library), and
// reports perplexity and the mean and peak number of entries the model
// attended over. Policies are then compared at equal MEAN live entries
// (DESIGN.md "Fair comparison"): each policy's log-perplexity is interpolated
// linearly in mean live entries between its two measured budgets that bracket
// each target. The pipelined mode (evictions applied one token late) is run at
// a few budgets beside the immediate mode.
//
// Writes <out>/tinystories_runs.csv, <out>/tinystories_results.json and, with
// gnuplot, <out>/tinystories_ppl_vs_live.png.
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
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "entrokv/core/config.h"
#include "entrokv/core/status_macros.h"
#include "tinyllama/decider.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/model.h"
#include "tinyllama/tokenizer.h"
#ifdef ENTROKV_TINYLLAMA_HAVE_CLIENT
#include "tinyllama/grpc_decider.h"
#endif

ABSL_FLAG(std::string, data, "",
          "Folder with stories260K.bin, tok512.bin and "
          "tinystories_valid_head.txt (default: $ENTROKV_DATA, else "
          "<repo>/../shared/data/tinystories).");
ABSL_FLAG(int, stories, 20, "Stories to evaluate, from the first.");
ABSL_FLAG(std::string, budgets, "16,32,64,128,192,256",
          "Nominal budgets B (live entries) to sweep.");
ABSL_FLAG(std::string, targets, "24,32,48,64,96",
          "Mean live entries at which policies are compared.");
ABSL_FLAG(std::string, policies, "all",
          "Comma-separated policy names (RANKING+CONTROL), or 'all'.");
ABSL_FLAG(std::string, pipelined_budgets, "64",
          "Budgets at which every policy is also run one step late.");
ABSL_FLAG(bool, inprocess, false,
          "Decide in this process with entrokv core instead of over gRPC.");
ABSL_FLAG(std::string, server, "localhost:50051",
          "entrokv server target for the gRPC decider.");
ABSL_FLAG(std::string, out, "eval-out", "Output folder.");
ABSL_FLAG(int, threads, 1, "Runs evaluated in parallel.");
ABSL_FLAG(bool, plot, true, "Draw the PNG with gnuplot.");
ABSL_FLAG(std::string, sketch, "exact",
          "Variant: keys and queries of every policy as sent: exact, or "
          "project:R (R columns of a seeded orthonormal projection, R <= "
          "head_dim 8).");
ABSL_FLAG(std::string, query_form, "per_head",
          "Variant: per_head, or group_sum (one summed query per kv head). "
          "Policies whose ranking needs each q head's attention (tova, h2o) "
          "are skipped with a note under group_sum.");
ABSL_FLAG(
    std::string, scored_layers, "all",
    "Variant: the model layers sent to entrokv: 'all', 'default' "
    "(DefaultScoredLayers: layers 0,1,3,4 of stories260K's 5), or a comma list "
    "such as 0,2,4.");
ABSL_FLAG(int, decide_every, 1,
          "Variant: decide on every K-th step only; the steps between send "
          "keys only, and live grows up to B+K-1 between decisions.");
ABSL_FLAG(int, block_size, 1,
          "Variant: evict whole blocks of N tokens (1: token granularity).");
ABSL_FLAG(bool, block_summary, false,
          "Variant: with --block_size N >= 2, one state per full block, "
          "scored from its mean key.");
ABSL_FLAG(bool, cadence_scaled_rates, false,
          "Variant: with --decide_every K > 1, scale the per-decision rates so "
          "that the state spans as many tokens as when deciding every step: "
          "affinity lambda -> lambda^K, entropy-budget EMA rate r -> "
          "1 - (1 - r)^K.");
ABSL_FLAG(bool, fidelity, false,
          "Measure the variant against the same policies scored exactly "
          "(same block size, no sketch, per-head queries, all layers, every "
          "step) at equal mean live entries --targets, by budget search; "
          "--budgets and --pipelined_budgets are not used.");

namespace entrokv::tinyllama {
namespace {

struct Run {
  SessionConfig config;  // Budget, policy and variant.
  std::string policy;
  std::string variant;  // VariantName(config).
  int lag = 0;
  bool record_evictions = false;
  // Results.
  double nll_sum = 0.0;
  int64_t predicted = 0;
  int64_t live_sum = 0;
  int64_t peak_live = 0;
  int64_t evicted = 0;
  int64_t deferred = 0;
  std::vector<double> story_nll;      // Per story: Σ −log p.
  std::vector<int64_t> story_tokens;  // Per story: tokens scored.
  // Per story, SequenceResult::evicted_at (record_evictions only).
  std::vector<std::vector<int32_t>> evicted_at;
  double seconds = 0.0;
  double ppl() const { return std::exp(nll_sum / predicted); }
  double mean_live() const { return static_cast<double>(live_sum) / predicted; }
};

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& text,
                                               const char* flag) {
  std::vector<int64_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a positive integer"));
    }
    values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  return values;
}

// The variant flags, applied to `config`.
absl::Status ApplyVariant(const ModelConfig& model, SessionConfig* config) {
  ENTROKV_RETURN_IF_ERROR(
      ApplySketchName(absl::GetFlag(FLAGS_sketch), &config->shape));
  if (!ParseQueryForm(absl::GetFlag(FLAGS_query_form),
                      &config->shape.query_form)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--query_form: '", absl::GetFlag(FLAGS_query_form),
                     "'; want per_head or group_sum"));
  }
  const std::string layers = absl::GetFlag(FLAGS_scored_layers);
  config->scored_layers.clear();
  if (layers == "default") {
    config->scored_layers = DefaultScoredLayers(model.layers);
  } else if (layers != "all") {
    for (absl::string_view part :
         absl::StrSplit(layers, ',', absl::SkipEmpty())) {
      int32_t l = 0;
      if (!absl::SimpleAtoi(part, &l) || l < 0 || l >= model.layers) {
        return absl::InvalidArgumentError(
            absl::StrCat("--scored_layers: '", part, "' is not a layer of 0..",
                         model.layers - 1));
      }
      config->scored_layers.push_back(l);
    }
    std::sort(config->scored_layers.begin(), config->scored_layers.end());
  }
  if (static_cast<int32_t>(config->scored_layers.size()) == model.layers) {
    config->scored_layers.clear();  // All of them: the plain shape.
  }
  config->shape.layers =
      config->scored_layers.empty()
          ? model.layers
          : static_cast<int32_t>(config->scored_layers.size());
  config->decide_every = absl::GetFlag(FLAGS_decide_every);
  config->block_size = absl::GetFlag(FLAGS_block_size);
  config->block_summary = absl::GetFlag(FLAGS_block_summary);
  return absl::OkStatus();
}

// The same policy scored exactly: every model layer, full head_dim, one query
// per q head, a decision every step, per-token state; the block size stays
// (block eviction is a granularity, not an approximation of scoring).
SessionConfig ExactScoring(const ModelConfig& model, SessionConfig config) {
  config.shape.sketch_dim = 0;
  config.shape.query_form = QueryForm::kPerHead;
  config.shape.layers = model.layers;
  config.scored_layers.clear();
  config.decide_every = 1;
  config.hard_ceiling = 0;
  config.block_summary = false;
  return config;
}

// "exact", or the variant's parts: "project:4 group_sum every:4 block:4
// summary layers:0,2,4".
std::string VariantName(const SessionConfig& config) {
  std::vector<std::string> parts;
  if (config.shape.sketch_dim > 0) parts.push_back(SketchName(config.shape));
  if (config.shape.query_form != QueryForm::kPerHead) {
    parts.emplace_back(QueryFormName(config.shape.query_form));
  }
  if (!config.scored_layers.empty()) {
    parts.push_back(
        absl::StrCat("layers:", absl::StrJoin(config.scored_layers, ",")));
  }
  if (config.decide_every > 1) {
    parts.push_back(absl::StrCat("every:", config.decide_every));
  }
  if (config.block_size > 1) {
    parts.push_back(absl::StrCat("block:", config.block_size));
  }
  if (config.block_summary) parts.emplace_back("summary");
  if (config.decide_every > 1 && absl::GetFlag(FLAGS_cadence_scaled_rates)) {
    parts.emplace_back("scaled-rates");
  }
  return parts.empty() ? "exact" : absl::StrJoin(parts, " ");
}

// The ranking state and the entropy EMA advance once per decision: with a
// decision every K steps, λ^K and 1 − (1 − r)^K span as many tokens as λ
// and r do when every step decides.
void ScaleRatesWithCadence(SessionConfig* config) {
  const int k = config->decide_every;
  if (k <= 1) return;
  config->affinity.lambda = std::pow(config->affinity.lambda, k);
  config->entropy_budget.ema_rate =
      1.0 - std::pow(1.0 - config->entropy_budget.ema_rate, k);
}

// A policy with the variant flags applied, and the same policy scored
// exactly (ExactScoring, with the policy's own rates).
struct PolicyPair {
  SessionConfig exact;
  SessionConfig variant;
};

absl::StatusOr<std::vector<PolicyPair>> Policies(const ModelConfig& model,
                                                 const std::string& flag) {
  std::vector<SessionConfig> named;
  if (flag == "all") {
    for (Ranking ranking : kAllRankings) {
      for (BudgetControl control : kAllBudgetControls) {
        SessionConfig config = EngineSessionConfig(model, 1);
        config.ranking = ranking;
        config.budget_control = control;
        named.push_back(config);
      }
    }
  } else {
    for (absl::string_view name :
         absl::StrSplit(flag, ',', absl::SkipEmpty())) {
      SessionConfig config = EngineSessionConfig(model, 1);
      const std::string n(name);
      ENTROKV_RETURN_IF_ERROR(ApplyPolicyName(n, &config));
      named.push_back(config);
    }
  }
  std::vector<PolicyPair> policies;
  for (SessionConfig config : named) {
    ENTROKV_RETURN_IF_ERROR(ApplyVariant(model, &config));
    if (config.shape.query_form == QueryForm::kGroupSum &&
        RankingNeedsPerHeadQueries(config.ranking)) {
      std::printf(
          "note: skipping %s: ranking %s needs each q head's "
          "attention, which group_sum queries do not give\n",
          PolicyName(config).c_str(),
          std::string(RankingName(config.ranking)).c_str());
      continue;
    }
    // Checked at a budget every variant accepts; each run sets its own.
    config.budget = 1 << 20;
    if (absl::Status st = ValidateSessionConfig(config); !st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat(PolicyName(config), " ", VariantName(config),
                                  ": ", st.message()));
    }
    config.budget = 1;
    PolicyPair pair{ExactScoring(model, config), config};
    if (absl::GetFlag(FLAGS_cadence_scaled_rates)) {
      ScaleRatesWithCadence(&pair.variant);
    }
    policies.push_back(pair);
  }
  if (policies.empty()) {
    return absl::InvalidArgumentError("no policy left to evaluate");
  }
  return policies;
}

absl::Status Evaluate(const Model& model,
                      const std::vector<std::vector<int>>& stories,
                      Decider* decider, Run* run) {
  const auto start = std::chrono::steady_clock::now();
  EvaluateOptions options;
  options.lag = run->lag;
  options.record_evictions = run->record_evictions;
  for (const std::vector<int>& tokens : stories) {
    std::unique_ptr<DeciderSession> session;
    if (decider != nullptr) {
      ENTROKV_ASSIGN_OR_RETURN(session, decider->Open(run->config));
    }
    ENTROKV_ASSIGN_OR_RETURN(
        SequenceResult r,
        EvaluateSequence(model, tokens, session.get(), options));
    if (session != nullptr) ENTROKV_RETURN_IF_ERROR(session->Close());
    run->nll_sum += r.nll_sum;
    run->predicted += r.predicted;
    run->live_sum += r.live_sum;
    run->peak_live = std::max(run->peak_live, r.peak_live);
    run->evicted += r.evicted;
    run->deferred += r.deferred;
    run->story_nll.push_back(r.nll_sum);
    run->story_tokens.push_back(r.predicted);
    if (run->record_evictions)
      run->evicted_at.push_back(std::move(r.evicted_at));
  }
  run->seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return absl::OkStatus();
}

// Perplexity at `target` mean live entries: log-perplexity interpolated
// linearly in mean live between the two measured points around it; NaN when
// the target is outside the measured range.
double PplAtMeanLive(std::vector<const Run*> points, double target) {
  std::sort(points.begin(), points.end(), [](const Run* a, const Run* b) {
    return a->mean_live() < b->mean_live();
  });
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const double x0 = points[i]->mean_live(), x1 = points[i + 1]->mean_live();
    if (target >= x0 && target <= x1) {
      const double y0 = std::log(points[i]->ppl());
      const double y1 = std::log(points[i + 1]->ppl());
      const double w = x1 > x0 ? (target - x0) / (x1 - x0) : 0.0;
      return std::exp(y0 + w * (y1 - y0));
    }
  }
  if (points.size() == 1 && points[0]->mean_live() == target) {
    return points[0]->ppl();
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::string Num(double v, int precision = 4) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.*f", precision, v);
}

absl::Status WriteFile(const std::filesystem::path& path,
                       const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("cannot write '", path.string(), "'"));
  }
  return absl::OkStatus();
}

// One configuration (policy + variant) at many nominal budgets, immediate
// mode, evictions recorded. Owned by one worker at a time.
struct Curve {
  SessionConfig config;
  std::map<int64_t, Run> runs;  // By nominal budget.
};

// Two adjacent nominal budgets whose mean live entries bracket a target, and
// the perplexity interpolated between them (null pointers and NaN when the
// target is outside what the budgets reach).
struct Bracket {
  const Run* lo = nullptr;  // mean live <= target.
  const Run* hi = nullptr;  // mean live > target, budget lo + 1.
  double ppl = std::numeric_limits<double>::quiet_NaN();
};

class FidelitySweep {
 public:
  FidelitySweep(const Model& model,
                const std::vector<std::vector<int>>& stories, Decider* decider)
      : model_(model), stories_(stories), decider_(decider) {}

  // The run of `curve` at `budget`, evaluated once.
  absl::StatusOr<const Run*> At(Curve* curve, int64_t budget) {
    auto it = curve->runs.find(budget);
    if (it != curve->runs.end()) return &it->second;
    Run run;
    run.config = curve->config;
    run.config.budget = budget;
    run.policy = PolicyName(run.config);
    run.variant = VariantName(run.config);
    run.record_evictions = true;
    ENTROKV_RETURN_IF_ERROR(Evaluate(model_, stories_, decider_, &run));
    std::printf(
        "%-18s %-22s B=%-4lld ppl %8.4f  mean live %6.2f  peak %4lld"
        "  (%.1fs)\n",
        run.policy.c_str(), run.variant.c_str(), static_cast<long long>(budget),
        run.ppl(), run.mean_live(), static_cast<long long>(run.peak_live),
        run.seconds);
    std::fflush(stdout);
    return &curve->runs.emplace(budget, std::move(run)).first->second;
  }

  // Searches the nominal budget until two adjacent budgets bracket `target`
  // mean live entries (mean live grows with the budget), starting from the
  // runs the curve has: a secant step on (budget, mean live), bisection when
  // that stalls.
  absl::StatusOr<Bracket> Find(Curve* curve, double target) {
    const int64_t min_budget =
        curve->config.block_summary ? curve->config.block_size : 1;
    const int64_t max_budget = model_.config().seq_len;  // Evicts nothing.
    int64_t lo = -1, hi = -1;
    auto note = [&](int64_t b, const Run& r) {
      if (r.mean_live() <= target) {
        if (lo < 0 || b > lo) lo = b;
      } else if (hi < 0 || b < hi) {
        hi = b;
      }
    };
    for (const auto& [b, r] : curve->runs) note(b, r);
    auto mean = [&](int64_t b) { return curve->runs.at(b).mean_live(); };
    for (int iteration = 0; !(lo >= 0 && hi >= 0 && hi - lo <= 1);
         ++iteration) {
      if (iteration > 60) {
        return absl::InternalError("budget search did not converge");
      }
      int64_t next;
      if (lo >= 0 && hi >= 0) {
        const double x = lo + (target - mean(lo)) * (hi - lo) /
                                  std::max(mean(hi) - mean(lo), 1e-9);
        next = iteration < 8 ? std::llround(x) : lo + (hi - lo) / 2;
        next = std::clamp<int64_t>(next, lo + 1, hi - 1);
      } else if (lo >= 0) {
        if (lo >= max_budget) return Bracket{};
        const double slope = std::max(mean(lo) / lo, 0.25);
        next = lo +
               std::max<int64_t>(1, std::llround((target - mean(lo)) / slope));
        next = std::min(next, max_budget);
      } else if (hi >= 0) {
        if (hi <= min_budget) return Bracket{};
        const double slope = std::max(mean(hi) / hi, 0.25);
        next = hi -
               std::max<int64_t>(1, std::llround((mean(hi) - target) / slope));
        next = std::max(next, min_budget);
      } else {
        next =
            std::clamp<int64_t>(std::llround(target), min_budget, max_budget);
      }
      ENTROKV_ASSIGN_OR_RETURN(const Run* r, At(curve, next));
      note(next, *r);
    }
    Bracket bracket;
    bracket.lo = &curve->runs.at(lo);
    bracket.hi = &curve->runs.at(hi);
    bracket.ppl = PplAtMeanLive({bracket.lo, bracket.hi}, target);
    return bracket;
  }

 private:
  const Model& model_;
  const std::vector<std::vector<int>>& stories_;
  Decider* decider_;
};

// Agreement of two runs' evictions, story by story (same stories, same
// nominal budget).
struct Overlap {
  // Jaccard index of the sets of positions ever evicted by the end of each
  // story, averaged over stories (1 when both evict nothing).
  double evicted = 0.0;
  // Jaccard index of the sets of entries each scored token attends over,
  // averaged over every scored token of every story.
  double live = 0.0;
};

Overlap CompareEvictions(const Run& a, const Run& b) {
  Overlap o;
  double live_sum = 0.0;
  int64_t tokens = 0;
  const size_t stories = std::min(a.evicted_at.size(), b.evicted_at.size());
  for (size_t s = 0; s < stories; ++s) {
    const std::vector<int32_t>& x = a.evicted_at[s];
    const std::vector<int32_t>& y = b.evicted_at[s];
    const size_t n = std::min(x.size(), y.size());
    int64_t both = 0, either = 0;
    for (size_t p = 0; p < n; ++p) {
      const bool ex = x[p] != kNeverEvicted, ey = y[p] != kNeverEvicted;
      both += ex && ey;
      either += ex || ey;
    }
    o.evicted += either == 0 ? 1.0 : static_cast<double>(both) / either;
    for (size_t t = 0; t < n; ++t) {
      int64_t in_both = 0, in_either = 0;
      for (size_t p = 0; p <= t; ++p) {
        const bool lx = x[p] > static_cast<int32_t>(t);
        const bool ly = y[p] > static_cast<int32_t>(t);
        in_both += lx && ly;
        in_either += lx || ly;
      }
      live_sum +=
          in_either == 0 ? 1.0 : static_cast<double>(in_both) / in_either;
      ++tokens;
    }
  }
  o.evicted = stories > 0 ? o.evicted / static_cast<double>(stories) : 0.0;
  o.live = tokens > 0 ? live_sum / static_cast<double>(tokens) : 0.0;
  return o;
}

// The variant's perplexity relative to the exact one at a target, with the
// story-to-story spread. Linear interpolation of log-perplexity between two
// runs over the same stories is the same weight applied to each story's NLL,
// so the difference splits exactly into per-story terms d_s; its standard
// error treats the stories as the sample (ratio estimator).
struct PairedDiff {
  double pct = std::numeric_limits<double>::quiet_NaN();  // 100·(ratio − 1).
  double se_pct = std::numeric_limits<double>::quiet_NaN();
};

std::vector<double> StoryNllAt(const Bracket& b, double target) {
  const double x0 = b.lo->mean_live(), x1 = b.hi->mean_live();
  const double w = x1 > x0 ? (target - x0) / (x1 - x0) : 0.0;
  std::vector<double> nll(b.lo->story_nll.size());
  for (size_t s = 0; s < nll.size(); ++s) {
    nll[s] = b.lo->story_nll[s] + w * (b.hi->story_nll[s] - b.lo->story_nll[s]);
  }
  return nll;
}

PairedDiff Difference(const Bracket& exact, const Bracket& variant,
                      double target) {
  PairedDiff out;
  if (exact.lo == nullptr || variant.lo == nullptr) return out;
  const std::vector<double> e = StoryNllAt(exact, target);
  const std::vector<double> v = StoryNllAt(variant, target);
  const std::vector<int64_t>& n = exact.lo->story_tokens;
  const size_t stories = e.size();
  double tokens = 0.0, d = 0.0;
  for (size_t s = 0; s < stories; ++s) {
    tokens += static_cast<double>(n[s]);
    d += v[s] - e[s];
  }
  const double mean = d / tokens;  // Difference of log-perplexities.
  double ss = 0.0;
  for (size_t s = 0; s < stories; ++s) {
    const double r = (v[s] - e[s]) - mean * static_cast<double>(n[s]);
    ss += r * r;
  }
  const double se =
      stories > 1 ? std::sqrt(ss * stories / (stories - 1.0)) / tokens : 0.0;
  out.pct = 100.0 * (std::exp(mean) - 1.0);
  out.se_pct = 100.0 * std::exp(mean) * se;
  return out;
}

// Runs `tasks` on `threads` workers; the first error stops the rest.
absl::Status RunTasks(std::vector<std::function<absl::Status()>> tasks,
                      int threads) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  absl::Status failure;
  auto worker = [&]() {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      absl::Status status = tasks[i]();
      if (!status.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.ok()) failure = status;
        next = tasks.size();
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  return failure;
}

std::string Budgets(const Bracket& b) {
  if (b.lo == nullptr) return "—";
  return absl::StrCat(b.lo->config.budget, "–", b.hi->config.budget, " (",
                      Num(b.lo->mean_live(), 1), "–", Num(b.hi->mean_live(), 1),
                      " / ", b.hi->peak_live, ")");
}

absl::Status Fidelity(const Model& model,
                      const std::vector<std::vector<int>>& stories,
                      Decider* decider, const std::vector<PolicyPair>& pairs,
                      const std::vector<int64_t>& targets,
                      const std::filesystem::path& out_dir) {
  // Per policy: the exact curve [2i] and the variant's [2i + 1].
  std::vector<Curve> curves;
  std::vector<SessionConfig> policies;
  for (const auto& [exact, policy] : pairs) {
    if (VariantName(exact) == VariantName(policy)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fidelity: the variant flags name exact scoring (",
                       VariantName(policy),
                       "); give a sketch, group_sum, scored layers, "
                       "--decide_every or --block_summary"));
    }
    curves.push_back({exact, {}});
    curves.push_back({policy, {}});
    policies.push_back(policy);
  }
  FidelitySweep sweep(model, stories, decider);
  std::vector<std::vector<Bracket>> brackets(
      curves.size(), std::vector<Bracket>(targets.size()));
  std::vector<std::function<absl::Status()>> tasks;
  for (size_t c = 0; c < curves.size(); ++c) {
    tasks.push_back([&, c]() -> absl::Status {
      for (size_t t = 0; t < targets.size(); ++t) {
        ENTROKV_ASSIGN_OR_RETURN(
            brackets[c][t],
            sweep.Find(&curves[c], static_cast<double>(targets[t])));
      }
      return absl::OkStatus();
    });
  }
  const int threads = absl::GetFlag(FLAGS_threads);
  ENTROKV_RETURN_IF_ERROR(RunTasks(std::move(tasks), threads));

  // The same nominal budget for the eviction comparison: the exact run's
  // budget whose mean live is nearer the target.
  std::vector<std::vector<int64_t>> nominal(
      policies.size(), std::vector<int64_t>(targets.size(), 0));
  tasks.clear();
  for (size_t i = 0; i < policies.size(); ++i) {
    for (size_t t = 0; t < targets.size(); ++t) {
      const Bracket& b = brackets[2 * i][t];
      if (b.lo == nullptr) continue;
      const double target = static_cast<double>(targets[t]);
      nominal[i][t] = target - b.lo->mean_live() <= b.hi->mean_live() - target
                          ? b.lo->config.budget
                          : b.hi->config.budget;
    }
    tasks.push_back([&, i]() -> absl::Status {
      for (size_t t = 0; t < targets.size(); ++t) {
        if (nominal[i][t] == 0) continue;
        ENTROKV_RETURN_IF_ERROR(
            sweep.At(&curves[2 * i + 1], nominal[i][t]).status());
      }
      return absl::OkStatus();
    });
  }
  ENTROKV_RETURN_IF_ERROR(RunTasks(std::move(tasks), threads));

  std::string md = absl::StrCat(
      "\nFidelity: perplexity at equal mean live entries, variant against the "
      "same policy scored exactly (log-ppl interpolated between the two "
      "adjacent nominal budgets that bracket each target)\n\n"
      "| policy | variant | live | ppl exact | ppl variant | diff % (± SE) | "
      "exact: "
      "B (mean live / peak) | variant: B (mean live / peak) | B same | "
      "evicted-set J | live-set J |\n"
      "|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|\n");
  std::string csv =
      "policy,variant,target_mean_live,ppl_exact,ppl_variant,diff_pct,"
      "diff_se_pct,"
      "exact_budget_lo,exact_budget_hi,exact_mean_live_lo,exact_mean_live_hi,"
      "exact_peak_live,variant_budget_lo,variant_budget_hi,"
      "variant_mean_live_lo,variant_mean_live_hi,variant_peak_live,"
      "same_budget,same_budget_mean_live_exact,same_budget_mean_live_variant,"
      "evicted_jaccard,live_jaccard,stories,tokens_scored\n";
  for (size_t i = 0; i < policies.size(); ++i) {
    for (size_t t = 0; t < targets.size(); ++t) {
      const Bracket& e = brackets[2 * i][t];
      const Bracket& v = brackets[2 * i + 1][t];
      const PairedDiff diff = Difference(e, v, static_cast<double>(targets[t]));
      Overlap overlap{std::numeric_limits<double>::quiet_NaN(),
                      std::numeric_limits<double>::quiet_NaN()};
      const Run* same_exact = nullptr;
      const Run* same_variant = nullptr;
      if (nominal[i][t] > 0) {
        same_exact = &curves[2 * i].runs.at(nominal[i][t]);
        same_variant = &curves[2 * i + 1].runs.at(nominal[i][t]);
        overlap = CompareEvictions(*same_exact, *same_variant);
      }
      const std::string policy = PolicyName(policies[i]);
      const std::string variant = VariantName(policies[i]);
      absl::StrAppend(
          &md, "| ", policy, " | ", variant, " | ", targets[t], " | ",
          Num(e.ppl, 4), " | ", Num(v.ppl, 4), " | ",
          std::isfinite(diff.pct)
              ? absl::StrFormat("%+.2f (± %.2f)", diff.pct, diff.se_pct)
              : "—",
          " | ", Budgets(e), " | ", Budgets(v), " | ", nominal[i][t], " | ",
          Num(overlap.evicted, 3), " | ", Num(overlap.live, 3), " |\n");
      auto lo_hi = [](const Bracket& b, bool mean) -> std::string {
        if (b.lo == nullptr) return ",";
        return mean ? absl::StrCat(Num(b.lo->mean_live(), 3), ",",
                                   Num(b.hi->mean_live(), 3))
                    : absl::StrCat(b.lo->config.budget, ",",
                                   b.hi->config.budget);
      };
      absl::StrAppend(
          &csv, policy, ",\"", variant, "\",", targets[t], ",", Num(e.ppl, 5),
          ",", Num(v.ppl, 5), ",", Num(diff.pct, 3), ",", Num(diff.se_pct, 3),
          ",", lo_hi(e, false), ",", lo_hi(e, true), ",",
          e.hi ? e.hi->peak_live : 0, ",", lo_hi(v, false), ",", lo_hi(v, true),
          ",", v.hi ? v.hi->peak_live : 0, ",", nominal[i][t], ",",
          same_exact ? Num(same_exact->mean_live(), 3) : "", ",",
          same_variant ? Num(same_variant->mean_live(), 3) : "", ",",
          Num(overlap.evicted, 4), ",", Num(overlap.live, 4), ",",
          stories.size(), ",", same_exact ? same_exact->predicted : 0, "\n");
    }
  }
  std::printf("%s", md.c_str());
  int64_t runs = 0;
  for (const Curve& c : curves) runs += static_cast<int64_t>(c.runs.size());
  std::printf("\n%lld runs of %zu stories\n", static_cast<long long>(runs),
              stories.size());
  ENTROKV_RETURN_IF_ERROR(WriteFile(out_dir / "fidelity.csv", csv));
  std::printf("wrote %s/fidelity.csv\n", out_dir.string().c_str());
  return absl::OkStatus();
}

absl::Status Main() {
  const std::string data_dir = ResolveDataDir(absl::GetFlag(FLAGS_data));
  ENTROKV_ASSIGN_OR_RETURN(Model model, Model::Load(ModelPath(data_dir)));
  ENTROKV_ASSIGN_OR_RETURN(
      Tokenizer tokenizer,
      Tokenizer::Load(TokenizerPath(data_dir), model.config().vocab_size));
  ENTROKV_ASSIGN_OR_RETURN(
      std::vector<std::string> texts,
      LoadStories(StoriesPath(data_dir), absl::GetFlag(FLAGS_stories)));
  std::vector<std::vector<int>> stories;
  int64_t tokens = 0;
  for (const std::string& text : texts) {
    stories.push_back(StoryTokens(tokenizer, text, model.config().seq_len));
    tokens += stories.back().size();
  }
  ENTROKV_ASSIGN_OR_RETURN(std::vector<int64_t> budgets,
                           ParseList(absl::GetFlag(FLAGS_budgets), "budgets"));
  ENTROKV_ASSIGN_OR_RETURN(std::vector<int64_t> targets,
                           ParseList(absl::GetFlag(FLAGS_targets), "targets"));
  ENTROKV_ASSIGN_OR_RETURN(
      std::vector<int64_t> pipelined,
      ParseList(absl::GetFlag(FLAGS_pipelined_budgets), "pipelined_budgets"));
  ENTROKV_ASSIGN_OR_RETURN(
      std::vector<PolicyPair> pairs,
      Policies(model.config(), absl::GetFlag(FLAGS_policies)));
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
              decider->Describe().c_str(), VariantName(policies[0]).c_str());

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
        run.variant = VariantName(run.config);
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
  absl::SetProgramUsageMessage(
      "Perplexity of stories260K against KV-cache memory for every entrokv "
      "policy.\n  entrokv-eval --inprocess [--stories 20] [--out DIR]\n"
      "  entrokv-eval --inprocess --fidelity --sketch project:4 "
      "[--policies ...] [--targets 32,64]");
  // --help lists this file's flags: Abseil's default looks for a file named
  // after the program ("entrokv-eval.cc", "entrokv-eval_main.cc"), which this
  // is not, and would list none.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "eval_main.");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = entrokv::tinyllama::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "entrokv-eval: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
