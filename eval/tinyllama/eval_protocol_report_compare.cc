// The protocol report's comparisons beside perplexity at equal mean live
// (eval_protocol_report.h): long-range perplexity over key tokens, and both
// measures at equal peak live.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tinyllama/eval_output.h"
#include "tinyllama/eval_policies.h"
#include "tinyllama/eval_protocol_report.h"

namespace entrokv::tinyllama {
namespace {

// The header of a table of differences against the reference.
std::string DiffHeader(const ProtocolResult& r, const std::string& what) {
  return absl::StrCat("\n", what, " against ", PolicyName(r.policies[r.ref]),
                      ", % [", Num(100 * r.level, 0),
                      "% paired bootstrap interval over test stories, ",
                      r.resamples, " resamples, seed ", r.seed,
                      "]; * = the interval excludes 0\n\n| policy |",
                      TargetColumns(r.targets, "---:|"));
}

// A row per policy but the reference: `cell(i, t)`.
template <typename Cell>
void AppendRows(const ProtocolResult& r, bool with_ref, Cell cell,
                std::string* md) {
  for (size_t i = 0; i < r.policies.size(); ++i) {
    if (i == r.ref && !with_ref) continue;
    absl::StrAppend(md, "| ", PolicyName(r.policies[i]), " |");
    for (size_t t = 0; t < r.targets.size(); ++t) {
      absl::StrAppend(md, " ", cell(i, t), " |");
    }
    absl::StrAppend(md, "\n");
  }
}

}  // namespace

std::string DiffCell(const PairedDifference& d) {
  return absl::StrFormat("%+.2f [%+.2f, %+.2f]%s", d.pct, d.lo_pct, d.hi_pct,
                         d.significant() ? " *" : "");
}

void AppendVerdict(const ProtocolResult& r,
                   const std::vector<std::vector<Point>>& points,
                   const std::vector<std::vector<PairedDifference>>& diffs,
                   std::string* md) {
  for (size_t t = 0; t < r.targets.size(); ++t) {
    std::vector<std::string> better, worse, tied;
    for (size_t i = 0; i < r.policies.size(); ++i) {
      if (i == r.ref || !points[i][t].ok() || !r.points[r.ref][t].ok()) {
        continue;
      }
      const PairedDifference& d = diffs[i][t];
      const std::string name = PolicyName(r.policies[i]);
      (d.hi_pct < 0 ? better : d.lo_pct > 0 ? worse : tied).push_back(name);
    }
    absl::StrAppend(md, "- live ", r.targets[t], ": significantly better: ",
                    better.empty() ? "none" : absl::StrJoin(better, ", "),
                    "; significantly worse: ",
                    worse.empty() ? "none" : absl::StrJoin(worse, ", "),
                    "; not distinguishable: ",
                    tied.empty() ? "none" : absl::StrJoin(tied, ", "), "\n");
  }
}

void AppendLongPerplexity(const ProtocolResult& r, std::string* md) {
  if (r.long_window <= 0) return;
  absl::StrAppend(
      md,
      "\nTest stories: long-range perplexity (LongPPL: perplexity over the ",
      r.key_token_count,
      " key tokens only, chosen once from the full cache and "
      "window+fixed at budget ",
      r.long_window,
      ") at the same points as the perplexity table; full cache ",
      Num(r.full_test_long_ppl, 3), "\n\n| policy |",
      TargetColumns(r.targets, "---:|"));
  AppendRows(
      r, true,
      [&](size_t i, size_t t) { return Num(r.points[i][t].long_ppl, 3); }, md);
  if (r.key_token_count == 0) {
    absl::StrAppend(md, "\nNo key token: no LongPPL comparison.\n");
    return;
  }
  absl::StrAppend(md, DiffHeader(r, "LongPPL difference"));
  AppendRows(
      r, false,
      [&](size_t i, size_t t) {
        return r.points[i][t].ok() && r.points[r.ref][t].ok()
                   ? DiffCell(r.long_vs_ref[i][t])
                   : std::string("—");
      },
      md);
  absl::StrAppend(md, "\nVerdict in LongPPL against ",
                  PolicyName(r.policies[r.ref]), " on the test stories:\n");
  AppendVerdict(r, r.points, r.long_vs_ref, md);
}

void AppendEqualPeak(const ProtocolResult& r, std::string* md) {
  if (!r.equal_peak) return;
  const std::string ref_name = PolicyName(r.policies[r.ref]);
  absl::StrAppend(
      md, "\nEqual peak: every policy at ", ref_name,
      "'s nominal budgets at each target (the same interpolation weight), "
      "an entropy-controlled budget capped at the nominal one "
      "(entropy_budget.max_budget = budget), so that no policy holds more "
      "entries at any step than ",
      ref_name,
      "; the entropy-controlled ones then hold fewer on average. "
      "Perplexity (mean live / peak live); ! = a peak above ",
      ref_name, "'s\n\n| policy |", TargetColumns(r.targets, "---:|"));
  AppendRows(
      r, true,
      [&](size_t i, size_t t) {
        const Point& p = r.peak_points[i][t];
        if (!p.ok()) return std::string("—");
        const bool over = p.peak_live > r.points[r.ref][t].peak_live;
        return absl::StrCat(Num(p.ppl, 3), " (", Num(p.mean_live, 2), " / ",
                            p.peak_live, over ? " !" : "", ")");
      },
      md);
  auto diff_rows = [&](const std::vector<std::vector<PairedDifference>>& d) {
    AppendRows(
        r, false,
        [&](size_t i, size_t t) {
          return r.peak_points[i][t].ok() && r.points[r.ref][t].ok()
                     ? DiffCell(d[i][t])
                     : std::string("—");
        },
        md);
  };
  absl::StrAppend(md, DiffHeader(r, "Equal peak: perplexity difference"));
  diff_rows(r.peak_vs_ref);
  if (!r.peak_long_vs_ref.empty()) {
    absl::StrAppend(md, DiffHeader(r, "Equal peak: LongPPL difference"));
    diff_rows(r.peak_long_vs_ref);
  }
  int64_t capped_runs = 0;
  for (const auto& c : r.peak_curves) {
    if (c != nullptr) capped_runs += static_cast<int64_t>(c->runs.size());
  }
  absl::StrAppend(md, "\n", capped_runs, " runs of ", r.split.test.size(),
                  " test stories with the cap\n");
  absl::StrAppend(md, "\nVerdict at equal peak against ", ref_name,
                  " (perplexity), test stories:\n");
  AppendVerdict(r, r.peak_points, r.peak_vs_ref, md);
  absl::StrAppend(
      md,
      "\nThe verdicts before the equal-peak tables are at equal mean "
      "live entries (docs/design.md \"Fair comparison\"). At the "
      "reference's budgets a fixed budget holds as many entries as the "
      "reference at every step, so its two points coincide when it was "
      "calibrated to the same budgets.\n");
}

}  // namespace entrokv::tinyllama
