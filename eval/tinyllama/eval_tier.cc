#include "tinyllama/eval_tier.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "entrokv/core/status_macros.h"
#include "tinyllama/calibrate.h"
#include "tinyllama/eval_flags.h"
#include "tinyllama/eval_output.h"
#include "tinyllama/eval_protocol.h"
#include "tinyllama/eval_protocol_compare.h"
#include "tinyllama/eval_run.h"
#include "tinyllama/evaluator.h"

namespace entrokv::tinyllama {
namespace {

// The tier's parameters, from the flags.
struct TierGrid {
  double share = 1.0;           // D = round(share · B).
  std::vector<double> margins;  // m; the first is the default.
  std::vector<int64_t> caps;    // P; the first is the default.
};

absl::StatusOr<TierGrid> GridFromFlags() {
  TierGrid g;
  g.share = absl::GetFlag(FLAGS_tier_share);
  if (!(g.share > 0.0) || !std::isfinite(g.share)) {
    return BadInput(absl::InvalidArgumentError(
        absl::StrCat("--tier_share: ", g.share, "; want a finite value > 0")));
  }
  for (absl::string_view part : absl::StrSplit(
           absl::GetFlag(FLAGS_tier_margins), ',', absl::SkipEmpty())) {
    double m = 0.0;
    if (!absl::SimpleAtod(part, &m) || !std::isfinite(m) || m < 0.0) {
      return BadInput(absl::InvalidArgumentError(absl::StrCat(
          "--tier_margins: '", part, "' is not a finite value >= 0")));
    }
    g.margins.push_back(m);
  }
  for (absl::string_view part : absl::StrSplit(
           absl::GetFlag(FLAGS_tier_max_promotions), ',', absl::SkipEmpty())) {
    int64_t p = 0;
    if (!absl::SimpleAtoi(part, &p) || p < 0) {
      return BadInput(absl::InvalidArgumentError(absl::StrCat(
          "--tier_max_promotions: '", part, "' is not an integer >= 0")));
    }
    g.caps.push_back(p);
  }
  if (g.margins.empty() || g.caps.empty()) {
    return BadInput(absl::InvalidArgumentError(
        "--tier_margins and --tier_max_promotions need a value each"));
  }
  return g;
}

// `config` at nominal budget `budget`, with a tier of share · budget entries
// (at least 1) when `tier` is set.
SessionConfig At(SessionConfig config, int64_t budget, const TierParams* tier,
                 double share) {
  config.budget = budget;
  if (tier != nullptr) {
    config.tier = *tier;
    config.tier.capacity =
        std::max<int64_t>(1, std::llround(share * static_cast<double>(budget)));
  } else {
    config.tier = TierParams{};
  }
  return config;
}

template <typename T>
T Sum(const std::vector<T>& v) {
  T sum = 0;
  for (const T& x : v) sum += x;
  return sum;
}

std::string TierText(const TierParams& t) {
  return absl::StrCat("m=", t.promote_margin, " P=", t.max_promotions);
}

// One policy's tuning: the candidates tried and the parameters chosen.
struct Tuned {
  std::vector<std::unique_ptr<Run>> candidates;  // Tier runs on tuning stories.
  std::unique_ptr<Run> evict;                    // The same without a tier.
  TierParams chosen;
};

// A policy's test runs at each budget.
struct TestRuns {
  std::vector<std::unique_ptr<Run>> evict;
  std::vector<std::unique_ptr<Run>> tier;
};

std::unique_ptr<Run> NewRun(const SessionConfig& config,
                            const std::vector<std::vector<uint8_t>>* keys) {
  auto run = std::make_unique<Run>();
  run->config = config;
  run->policy = PolicyName(config);
  run->key_tokens = keys;
  return run;
}

std::function<absl::Status()> Task(const Model& model,
                                   const std::vector<std::vector<int>>& stories,
                                   Decider* decider, Run* run) {
  return [&model, &stories, decider, run]() {
    return Evaluate(model, stories, decider, run);
  };
}

// Tunes m, then P, for every policy on the tuning stories.
absl::Status Tune(const Model& model,
                  const std::vector<std::vector<int>>& stories,
                  Decider* decider, const std::vector<SessionConfig>& policies,
                  const TierGrid& grid, int64_t budget, int threads,
                  std::vector<Tuned>* tuned) {
  std::vector<std::function<absl::Status()>> tasks;
  for (size_t i = 0; i < policies.size(); ++i) {
    Tuned& t = (*tuned)[i];
    t.evict = NewRun(At(policies[i], budget, nullptr, 0.0), nullptr);
    tasks.push_back(Task(model, stories, decider, t.evict.get()));
    for (double m : grid.margins) {
      TierParams p;
      p.promote_margin = m;
      p.max_promotions = grid.caps[0];
      t.candidates.push_back(
          NewRun(At(policies[i], budget, &p, grid.share), nullptr));
      tasks.push_back(Task(model, stories, decider, t.candidates.back().get()));
    }
  }
  ENTROKV_RETURN_IF_ERROR(RunTasks(std::move(tasks), threads));
  // The best of a policy's candidates from `first` on, the earliest on ties.
  auto best = [](const Tuned& t, size_t first) {
    const Run* b = t.candidates[first].get();
    for (size_t c = first; c < t.candidates.size(); ++c) {
      if (t.candidates[c]->ppl() < b->ppl()) b = t.candidates[c].get();
    }
    return b->config.tier;
  };
  tasks.clear();
  for (size_t i = 0; i < policies.size(); ++i) {
    Tuned& t = (*tuned)[i];
    t.chosen = best(t, 0);
    for (size_t c = 1; c < grid.caps.size(); ++c) {
      TierParams p = t.chosen;
      p.max_promotions = grid.caps[c];
      t.candidates.push_back(
          NewRun(At(policies[i], budget, &p, grid.share), nullptr));
      tasks.push_back(Task(model, stories, decider, t.candidates.back().get()));
    }
  }
  ENTROKV_RETURN_IF_ERROR(RunTasks(std::move(tasks), threads));
  for (Tuned& t : *tuned) t.chosen = best(t, 0);
  return absl::OkStatus();
}

std::string Pct(const PairedDifference& d) {
  return absl::StrFormat("%+.2f [%+.2f, %+.2f]%s", d.pct, d.lo_pct, d.hi_pct,
                         d.significant() ? " *" : "");
}

}  // namespace

absl::Status TierComparison(const Model& model,
                            const std::vector<std::vector<int>>& stories,
                            Decider* decider,
                            const std::vector<SessionConfig>& policies) {
  ENTROKV_ASSIGN_OR_RETURN(const TierGrid grid, GridFromFlags());
  ENTROKV_ASSIGN_OR_RETURN(
      const std::vector<int64_t> budgets,
      ParseList(absl::GetFlag(FLAGS_tier_budgets), "tier_budgets"));
  if (budgets.empty()) {
    return BadInput(absl::InvalidArgumentError("--tier_budgets: no budget"));
  }
  // Every policy must take a tier (section 12's refusals).
  for (const SessionConfig& c : policies) {
    TierParams probe;
    probe.max_promotions = grid.caps[0];
    probe.promote_margin = grid.margins[0];
    const SessionConfig with = At(c, budgets[0], &probe, grid.share);
    if (absl::Status st = ValidateSessionConfig(with); !st.ok()) {
      return BadInput(absl::Status(
          st.code(), absl::StrCat("--tier: ", PolicyName(c),
                                  " cannot take a tier: ", st.message())));
    }
  }
  const bool quick = absl::GetFlag(FLAGS_quick);
  const int threads = absl::GetFlag(FLAGS_threads);
  const int resamples = quick ? 200 : absl::GetFlag(FLAGS_bootstrap);
  const uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  const int64_t tune_budget = absl::GetFlag(FLAGS_tune_target);

  // The split, the full cache and the key tokens, as the protocol has them.
  ProtocolResult r;
  r.quick = quick;
  r.threads = threads;
  r.long_window = absl::GetFlag(FLAGS_longppl_window);
  r.key_params.alpha = absl::GetFlag(FLAGS_longppl_alpha);
  r.key_params.beta = absl::GetFlag(FLAGS_longppl_beta);
  r.split = quick ? SplitStories(static_cast<int>(stories.size()), 8, 8)
                  : SplitStories(static_cast<int>(stories.size()),
                                 absl::GetFlag(FLAGS_tune),
                                 absl::GetFlag(FLAGS_test));
  if (r.split.test.empty()) {
    return BadInput(absl::InvalidArgumentError("--tier: no test stories"));
  }
  std::vector<std::vector<int>> tune_stories, test_stories;
  for (int i : r.split.tune) tune_stories.push_back(stories[i]);
  for (int i : r.split.test) {
    test_stories.push_back(stories[i]);
    r.test_tokens += static_cast<int64_t>(stories[i].size()) - 1;
  }
  r.full.policy = "full";
  r.full.keep_token_nll = r.long_window > 0;
  ENTROKV_RETURN_IF_ERROR(Evaluate(model, stories, nullptr, &r.full));
  {
    double nll = 0.0;
    for (int i : r.split.test) nll += r.full.story_nll[i];
    r.full_test_ppl = std::exp(nll / static_cast<double>(r.test_tokens));
  }
  std::printf(
      "tier: %zu tuning stories, %zu test stories (%lld scored "
      "tokens); full cache on the test stories: ppl %.4f\n",
      r.split.tune.size(), r.split.test.size(),
      static_cast<long long>(r.test_tokens), r.full_test_ppl);
  if (r.long_window > 0) {
    ENTROKV_RETURN_IF_ERROR(KeyTokens(model, test_stories, decider, &r));
  }
  const std::vector<std::vector<uint8_t>>* keys = KeysOf(r);

  // Tuning.
  std::vector<Tuned> tuned(policies.size());
  const bool tuning = absl::GetFlag(FLAGS_tuning) && !tune_stories.empty();
  if (tuning) {
    ENTROKV_RETURN_IF_ERROR(Tune(model, tune_stories, decider, policies, grid,
                                 tune_budget, threads, &tuned));
  } else {
    for (Tuned& t : tuned) {
      t.chosen.promote_margin = grid.margins[0];
      t.chosen.max_promotions = grid.caps[0];
    }
  }

  // Test: each policy with and without the tier, and window+fixed, at every
  // budget.
  SessionConfig window = policies[0];
  ENTROKV_RETURN_IF_ERROR(ApplyPolicyName("window+fixed", &window));
  std::vector<std::unique_ptr<Run>> window_runs;
  std::vector<TestRuns> test(policies.size());
  std::vector<std::function<absl::Status()>> tasks;
  for (int64_t b : budgets) {
    window_runs.push_back(NewRun(At(window, b, nullptr, 0.0), keys));
    tasks.push_back(
        Task(model, test_stories, decider, window_runs.back().get()));
  }
  // The slowest runs (the largest budgets, with a tier) first.
  for (size_t k = budgets.size(); k-- > 0;) {
    for (size_t i = 0; i < policies.size(); ++i) {
      TestRuns& t = test[i];
      if (t.tier.empty()) {
        t.tier.resize(budgets.size());
        t.evict.resize(budgets.size());
      }
      t.tier[k] = NewRun(
          At(policies[i], budgets[k], &tuned[i].chosen, grid.share), keys);
      t.evict[k] = NewRun(At(policies[i], budgets[k], nullptr, 0.0), keys);
      tasks.insert(tasks.begin(),
                   Task(model, test_stories, decider, t.tier[k].get()));
      tasks.push_back(Task(model, test_stories, decider, t.evict[k].get()));
    }
  }
  ENTROKV_RETURN_IF_ERROR(RunTasks(std::move(tasks), threads));

  // The report.
  std::string md =
      "# Demote tier against eviction only (entrokv-eval --tier)\n\n";
  absl::StrAppendFormat(
      &md,
      "Test stories %d–%d (%zu stories, %lld scored tokens); full cache "
      "perplexity %.4f. Tier capacity D = %g × B; entry = K + V of every "
      "layer = %lld bytes. A fixed budget holds the same device entries "
      "with or without the tier at every step (mean live below).\n\n",
      r.split.test.front() + 1, r.split.test.back() + 1, r.split.test.size(),
      static_cast<long long>(r.test_tokens), r.full_test_ppl, grid.share,
      static_cast<long long>(model.NewCache().entry_bytes()));
  if (!r.key_text.empty()) absl::StrAppend(&md, r.key_text, ".\n\n");
  if (tuning) {
    absl::StrAppendFormat(
        &md,
        "## Tuning (tuning stories %d–%d, nominal budget %lld, D = %lld)\n\n"
        "m in {%s} at P = %lld, then P in the rest of {%s} at the best m; "
        "the first is the default, a candidate must be strictly better.\n\n"
        "| policy | tier | ppl | promotions/step | bytes moved/step |\n"
        "|---|---|---:|---:|---:|\n",
        r.split.tune.front() + 1, r.split.tune.back() + 1,
        static_cast<long long>(tune_budget),
        static_cast<long long>(std::max<int64_t>(
            1, std::llround(grid.share * static_cast<double>(tune_budget)))),
        absl::StrJoin(grid.margins, ", "), static_cast<long long>(grid.caps[0]),
        absl::StrJoin(grid.caps, ", "));
    for (size_t i = 0; i < policies.size(); ++i) {
      const Tuned& t = tuned[i];
      absl::StrAppendFormat(&md, "| %s | none | %.4f | | |\n",
                            PolicyName(policies[i]), t.evict->ppl());
      for (const auto& c : t.candidates) {
        const bool chosen =
            c->config.tier.promote_margin == t.chosen.promote_margin &&
            c->config.tier.max_promotions == t.chosen.max_promotions;
        absl::StrAppendFormat(&md, "| %s | %s%s | %.4f | %.3f | %.0f |\n",
                              PolicyName(policies[i]), TierText(c->config.tier),
                              chosen ? " (chosen)" : "", c->ppl(),
                              c->promotions_per_step(),
                              c->bytes_moved_per_step());
      }
    }
    absl::StrAppend(&md, "\n");
  }
  absl::StrAppend(
      &md,
      "## Test stories, at equal device memory\n\n"
      "Perplexity and LongPPL; tier vs none: % change with the tier, [95% "
      "paired bootstrap interval, ",
      resamples,
      " resamples]; * = the interval excludes 0. Moves and bytes per decode "
      "step; host peak: the most entries in the host tier at once (D plus a "
      "step's swaps, demoted before its promotions free their rows); s: "
      "seconds per run.\n\n"
      "| policy | B | mean live (none / tier) | ppl none | ppl tier | tier vs "
      "none | LongPPL none | LongPPL tier | LongPPL tier vs none | "
      "promotions/step | demotions/step | evictions/step | bytes moved/step "
      "| host peak | s none / tier |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      "---:|\n");
  for (size_t k = 0; k < budgets.size(); ++k) {
    const Run& w = *window_runs[k];
    absl::StrAppendFormat(
        &md,
        "| window+fixed | %lld | %.2f | %.4f | | | %s | | | | | | | | %.1f |\n",
        static_cast<long long>(budgets[k]), w.mean_live(), w.ppl(),
        keys
            ? Num(LongPerplexity(Sum(w.story_key_nll), Sum(w.story_key_tokens)),
                  3)
            : std::string(""),
        w.seconds);
  }
  for (size_t i = 0; i < policies.size(); ++i) {
    for (size_t k = 0; k < budgets.size(); ++k) {
      const Run& e = *test[i].evict[k];
      const Run& t = *test[i].tier[k];
      const PairedDifference d = PairedBootstrap(
          e.story_nll, t.story_nll, t.story_tokens, resamples, seed, 0.95);
      std::string long_e, long_t, long_d;
      if (keys != nullptr) {
        long_e = Num(
            LongPerplexity(Sum(e.story_key_nll), Sum(e.story_key_tokens)), 3);
        long_t = Num(
            LongPerplexity(Sum(t.story_key_nll), Sum(t.story_key_tokens)), 3);
        long_d =
            Pct(PairedBootstrap(e.story_key_nll, t.story_key_nll,
                                t.story_key_tokens, resamples, seed, 0.95));
      }
      const double steps = static_cast<double>(t.predicted);
      absl::StrAppendFormat(
          &md,
          "| %s (%s) | %lld | %.2f / %.2f | %.4f | %.4f | %s | %s | %s | %s | "
          "%.3f | %.3f | %.3f | %.0f | %lld | %.1f / %.1f |\n",
          PolicyName(policies[i]), TierText(t.config.tier),
          static_cast<long long>(budgets[k]), e.mean_live(), t.mean_live(),
          e.ppl(), t.ppl(), Pct(d), long_e, long_t, long_d,
          t.promotions_per_step(), static_cast<double>(t.demoted) / steps,
          static_cast<double>(t.evicted) / steps, t.bytes_moved_per_step(),
          static_cast<long long>(t.peak_host), e.seconds, t.seconds);
    }
  }
  std::printf("\n%s", md.c_str());

  std::string csv =
      "policy,tier_capacity,promote_margin,max_promotions,budget,stories,"
      "tokens,ppl,long_ppl,mean_live,peak_live,evicted,demoted,promoted,"
      "bytes_moved,peak_host,seconds\n";
  auto row = [&](const Run& run) {
    absl::StrAppendFormat(
        &csv,
        "%s,%lld,%g,%lld,%lld,%zu,%lld,%.6f,%s,%.4f,%lld,%lld,%lld,"
        "%lld,%lld,%lld,%.2f\n",
        run.policy, static_cast<long long>(run.config.tier.capacity),
        run.config.tier.promote_margin,
        static_cast<long long>(run.config.tier.max_promotions),
        static_cast<long long>(run.config.budget), run.story_nll.size(),
        static_cast<long long>(run.predicted), run.ppl(),
        run.story_key_nll.empty()
            ? std::string("")
            : Num(LongPerplexity(Sum(run.story_key_nll),
                                 Sum(run.story_key_tokens)),
                  6),
        run.mean_live(), static_cast<long long>(run.peak_live),
        static_cast<long long>(run.evicted),
        static_cast<long long>(run.demoted),
        static_cast<long long>(run.promoted),
        static_cast<long long>(run.bytes_moved),
        static_cast<long long>(run.peak_host), run.seconds);
  };
  for (const auto& w : window_runs) row(*w);
  for (const TestRuns& t : test) {
    for (const auto& e : t.evict) row(*e);
    for (const auto& x : t.tier) row(*x);
  }
  const std::filesystem::path out_dir = absl::GetFlag(FLAGS_out);
  ENTROKV_RETURN_IF_ERROR(CreateOutputDir(out_dir));
  ENTROKV_RETURN_IF_ERROR(WriteFile(out_dir / "tier_report.md", md));
  ENTROKV_RETURN_IF_ERROR(WriteFile(out_dir / "tier_runs.csv", csv));
  std::printf("\nwrote %s/tier_report.md, tier_runs.csv\n",
              out_dir.string().c_str());
  return absl::OkStatus();
}

}  // namespace entrokv::tinyllama
