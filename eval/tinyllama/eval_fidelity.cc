#include "tinyllama/eval_fidelity.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "entrokv/core/status_macros.h"
#include "eval/lib/budget_search.h"
#include "eval/lib/interpolate.h"
#include "eval/lib/overlap.h"
#include "tinyllama/eval_flags.h"
#include "tinyllama/eval_output.h"
#include "tinyllama/evaluator.h"

namespace entrokv::tinyllama {
namespace {

std::vector<double> StoryNllAt(const Bracket& b, double target) {
  return eval::LerpEach(
      b.lo->story_nll, b.hi->story_nll,
      eval::InterpolationWeight(b.lo->mean_live(), b.hi->mean_live(), target));
}

// "lo–hi (mean live lo–hi / peak of hi)", or "—" for an empty bracket.
std::string Budgets(const Bracket& b) {
  if (b.lo == nullptr) return "—";
  return absl::StrCat(b.lo->config.budget, "–", b.hi->config.budget, " (",
                      Num(b.lo->mean_live(), 1), "–", Num(b.hi->mean_live(), 1),
                      " / ", b.hi->peak_live, ")");
}

// Everything a fidelity measurement finds, for the table.
struct FidelityData {
  // Per policy i: the exact curve [2i] and the variant's [2i + 1].
  std::vector<Curve> curves;
  std::vector<SessionConfig> policies;         // The variants.
  std::vector<std::vector<Bracket>> brackets;  // [curve][target].
  // [policy][target]: the nominal budget at which the evictions are
  // compared (0: none, the exact bracket is empty).
  std::vector<std::vector<int64_t>> nominal;
};

absl::Status MakeCurves(const std::vector<PolicyPair>& pairs,
                        FidelityData* data) {
  for (const auto& [exact, policy] : pairs) {
    if (VariantLabel(exact) == VariantLabel(policy)) {
      return BadInput(absl::InvalidArgumentError(
          absl::StrCat("--fidelity: the variant flags name exact scoring (",
                       VariantLabel(policy),
                       "); give a sketch, group_sum, scored layers, "
                       "--decide_every or --block_summary")));
    }
    data->curves.push_back({exact, {}, ""});
    data->curves.push_back({policy, {}, ""});
    data->policies.push_back(policy);
  }
  return absl::OkStatus();
}

// Every curve at every target: the bracketing pair of budgets.
absl::Status FindBrackets(CurveSearch* sweep,
                          const std::vector<int64_t>& targets, int threads,
                          FidelityData* data) {
  data->brackets.assign(data->curves.size(),
                        std::vector<Bracket>(targets.size()));
  std::vector<std::function<absl::Status()>> tasks;
  for (size_t c = 0; c < data->curves.size(); ++c) {
    tasks.push_back([&, c]() -> absl::Status {
      for (size_t t = 0; t < targets.size(); ++t) {
        ENTROKV_ASSIGN_OR_RETURN(
            data->brackets[c][t],
            sweep->Find(&data->curves[c], static_cast<double>(targets[t])));
      }
      return absl::OkStatus();
    });
  }
  return RunTasks(std::move(tasks), threads);
}

// The same nominal budget for the eviction comparison: the exact run's
// budget whose mean live is nearer the target; the variant is run there too.
absl::Status RunSameBudgets(CurveSearch* sweep,
                            const std::vector<int64_t>& targets, int threads,
                            FidelityData* data) {
  data->nominal.assign(data->policies.size(),
                       std::vector<int64_t>(targets.size(), 0));
  std::vector<std::function<absl::Status()>> tasks;
  for (size_t i = 0; i < data->policies.size(); ++i) {
    for (size_t t = 0; t < targets.size(); ++t) {
      const Bracket& b = data->brackets[2 * i][t];
      if (b.lo == nullptr) continue;
      const double target = static_cast<double>(targets[t]);
      data->nominal[i][t] =
          eval::LowerIsNearer(b.lo->mean_live(), b.hi->mean_live(), target)
              ? b.lo->config.budget
              : b.hi->config.budget;
    }
    tasks.push_back([&, i]() -> absl::Status {
      for (size_t t = 0; t < targets.size(); ++t) {
        if (data->nominal[i][t] == 0) continue;
        ENTROKV_RETURN_IF_ERROR(
            sweep->At(&data->curves[2 * i + 1], data->nominal[i][t]).status());
      }
      return absl::OkStatus();
    });
  }
  return RunTasks(std::move(tasks), threads);
}

constexpr char kMarkdownHeader[] =
    "\nFidelity: perplexity at equal mean live entries, variant against the "
    "same policy scored exactly (log-ppl interpolated between the two "
    "adjacent nominal budgets that bracket each target)\n\n"
    "| policy | variant | live | ppl exact | ppl variant | diff % (± SE) | "
    "exact: "
    "B (mean live / peak) | variant: B (mean live / peak) | B same | "
    "evicted-set J | live-set J |\n"
    "|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|\n";

constexpr char kCsvHeader[] =
    "policy,variant,target_mean_live,ppl_exact,ppl_variant,diff_pct,"
    "diff_se_pct,"
    "exact_budget_lo,exact_budget_hi,exact_mean_live_lo,exact_mean_live_hi,"
    "exact_peak_live,variant_budget_lo,variant_budget_hi,"
    "variant_mean_live_lo,variant_mean_live_hi,variant_peak_live,"
    "same_budget,same_budget_mean_live_exact,same_budget_mean_live_variant,"
    "evicted_jaccard,live_jaccard,stories,tokens_scored\n";

// "lo,hi" of a bracket's budgets or (`mean`) mean lives; "," when empty.
std::string LoHi(const Bracket& b, bool mean) {
  if (b.lo == nullptr) return ",";
  return mean ? absl::StrCat(Num(b.lo->mean_live(), 3), ",",
                             Num(b.hi->mean_live(), 3))
              : absl::StrCat(b.lo->config.budget, ",", b.hi->config.budget);
}

// Policy i at target t: a row of the table and of the CSV.
void AppendRow(const FidelityData& data, size_t i, size_t t,
               const std::vector<int64_t>& targets, size_t stories,
               std::string* md, std::string* csv) {
  const Bracket& e = data.brackets[2 * i][t];
  const Bracket& v = data.brackets[2 * i + 1][t];
  const int64_t nominal = data.nominal[i][t];
  const PairedDiff diff = Difference(e, v, static_cast<double>(targets[t]));
  Overlap overlap{std::numeric_limits<double>::quiet_NaN(),
                  std::numeric_limits<double>::quiet_NaN()};
  const Run* same_exact = nullptr;
  const Run* same_variant = nullptr;
  if (nominal > 0) {
    same_exact = &data.curves[2 * i].runs.at(nominal);
    same_variant = &data.curves[2 * i + 1].runs.at(nominal);
    overlap = CompareEvictions(*same_exact, *same_variant);
  }
  const std::string policy = PolicyName(data.policies[i]);
  const std::string variant = VariantLabel(data.policies[i]);
  absl::StrAppend(md, "| ", policy, " | ", variant, " | ", targets[t], " | ",
                  Num(e.ppl, 4), " | ", Num(v.ppl, 4), " | ",
                  std::isfinite(diff.pct)
                      ? absl::StrFormat("%+.2f (± %.2f)", diff.pct, diff.se_pct)
                      : "—",
                  " | ", Budgets(e), " | ", Budgets(v), " | ", nominal, " | ",
                  Num(overlap.evicted, 3), " | ", Num(overlap.live, 3), " |\n");
  absl::StrAppend(csv, policy, ",\"", variant, "\",", targets[t], ",",
                  Num(e.ppl, 5), ",", Num(v.ppl, 5), ",", Num(diff.pct, 3), ",",
                  Num(diff.se_pct, 3), ",", LoHi(e, false), ",", LoHi(e, true),
                  ",", e.hi ? e.hi->peak_live : 0, ",", LoHi(v, false), ",",
                  LoHi(v, true), ",", v.hi ? v.hi->peak_live : 0, ",", nominal,
                  ",", same_exact ? Num(same_exact->mean_live(), 3) : "", ",",
                  same_variant ? Num(same_variant->mean_live(), 3) : "", ",",
                  Num(overlap.evicted, 4), ",", Num(overlap.live, 4), ",",
                  stories, ",", same_exact ? same_exact->predicted : 0, "\n");
}

}  // namespace

Overlap CompareEvictions(const Run& a, const Run& b) {
  Overlap o;
  double live_sum = 0.0;
  int64_t tokens = 0;
  const size_t stories = std::min(a.evicted_at.size(), b.evicted_at.size());
  for (size_t s = 0; s < stories; ++s) {
    const std::vector<int32_t>& x = a.evicted_at[s];
    const std::vector<int32_t>& y = b.evicted_at[s];
    o.evicted += eval::EvictedSetJaccard(x, y, kNeverEvicted);
    tokens += eval::AddLiveSetJaccards(x, y, &live_sum);
  }
  o.evicted = stories > 0 ? o.evicted / static_cast<double>(stories) : 0.0;
  o.live = tokens > 0 ? live_sum / static_cast<double>(tokens) : 0.0;
  return o;
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

absl::Status Fidelity(const Model& model,
                      const std::vector<std::vector<int>>& stories,
                      Decider* decider, const std::vector<PolicyPair>& pairs,
                      const std::vector<int64_t>& targets,
                      const std::filesystem::path& out_dir) {
  FidelityData data;
  ENTROKV_RETURN_IF_ERROR(MakeCurves(pairs, &data));
  CurveSearch sweep(model, stories, decider);
  const int threads = absl::GetFlag(FLAGS_threads);
  ENTROKV_RETURN_IF_ERROR(FindBrackets(&sweep, targets, threads, &data));
  ENTROKV_RETURN_IF_ERROR(RunSameBudgets(&sweep, targets, threads, &data));

  std::string md = kMarkdownHeader;
  std::string csv = kCsvHeader;
  for (size_t i = 0; i < data.policies.size(); ++i) {
    for (size_t t = 0; t < targets.size(); ++t) {
      AppendRow(data, i, t, targets, stories.size(), &md, &csv);
    }
  }
  std::printf("%s", md.c_str());
  int64_t runs = 0;
  for (const Curve& c : data.curves) {
    runs += static_cast<int64_t>(c.runs.size());
  }
  std::printf("\n%lld runs of %zu stories\n", static_cast<long long>(runs),
              stories.size());
  ENTROKV_RETURN_IF_ERROR(WriteFile(out_dir / "fidelity.csv", csv));
  std::printf("wrote %s/fidelity.csv\n", out_dir.string().c_str());
  return absl::OkStatus();
}

}  // namespace entrokv::tinyllama
