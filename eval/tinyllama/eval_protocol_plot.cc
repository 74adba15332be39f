// PlotProtocol (eval_protocol_report.h): the protocol's three-panel plot.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tinyllama/eval_output.h"
#include "tinyllama/eval_protocol_report.h"

namespace entrokv::tinyllama {
namespace {

// Far above the rest: drawn in the log-scale panel only.
bool Outlier(const SessionConfig& c) { return !Competitive(c); }

const char* Color(Ranking r) {
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
    case Ranking::kKeyDiff:
      return "#17becf";
    case Ranking::kExpected:
      return "#e377c2";
    case Ranking::kBirth:
      return "#bcbd22";
    case Ranking::kRkv:
      return "#7f7f7f";
  }
  return "#000000";
}

// Filled point types for fixed, the open ones for entropy.
int PointType(const SessionConfig& c) {
  static constexpr int kFilled[] = {5, 7, 9, 11, 13, 3, 15, 7, 9, 11, 13};
  const int p = kFilled[static_cast<int>(c.ranking) % 11];
  return c.budget_control == BudgetControl::kEntropy && p != 3 ? p - 1 : p;
}

// The y range of the difference panel: the competitive policies' intervals,
// h2o's left out (`clipped`) when it is far above the rest (it is in the
// first panel).
struct DiffRange {
  double lo = -0.5;
  double hi = 0.5;
  bool clipped = false;
};

DiffRange DifferenceRange(const ProtocolResult& r) {
  DiffRange range;
  for (size_t pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < r.policies.size(); ++i) {
      if (Outlier(r.policies[i]) || i == r.ref) continue;
      const bool h2o = r.policies[i].ranking == Ranking::kH2o;
      if ((pass == 0) == h2o) continue;
      for (size_t t = 0; t < r.targets.size(); ++t) {
        if (!r.points[i][t].ok()) continue;
        const PairedDifference& d = r.vs_ref[i][t];
        if (pass == 1 &&
            (d.hi_pct > range.hi + 2.0 || d.lo_pct < range.lo - 2.0)) {
          range.clipped = true;
          continue;
        }
        range.lo = std::min(range.lo, d.lo_pct);
        range.hi = std::max(range.hi, d.hi_pct);
      }
    }
  }
  return range;
}

// The data file (a block per policy) and each panel's plot clauses.
struct Panels {
  std::string dat;
  std::vector<std::string> a, b, c;
};

Panels MakePanels(const ProtocolResult& r, const std::string& dat_path) {
  size_t competitive = 0;
  for (const SessionConfig& c : r.policies) competitive += !Outlier(c);
  Panels panels;
  size_t k = 0;
  for (size_t i = 0; i < r.policies.size(); ++i) {
    const SessionConfig& c = r.policies[i];
    const double jitter =
        Outlier(c) ? 0.0
                   : (static_cast<double>(k++) -
                      (static_cast<double>(competitive) - 1.0) / 2.0) *
                         0.45;
    absl::StrAppend(&panels.dat, "# ", PolicyName(c),
                    ": mean_live x pct_over_full lo hi diff lo hi ppl\n");
    for (size_t t = 0; t < r.targets.size(); ++t) {
      const Point& p = r.points[i][t];
      if (!p.ok()) continue;
      const PairedDifference& f = r.vs_full[i][t];
      const PairedDifference& d = r.vs_ref[i][t];
      absl::StrAppend(&panels.dat, Num(p.mean_live, 3), " ",
                      Num(static_cast<double>(r.targets[t]) + jitter, 3), " ",
                      Num(f.pct, 3), " ", Num(f.lo_pct, 3), " ",
                      Num(f.hi_pct, 3), " ", Num(d.pct, 3), " ",
                      Num(d.lo_pct, 3), " ", Num(d.hi_pct, 3), " ",
                      Num(p.ppl, 5), "\n");
    }
    absl::StrAppend(&panels.dat, "\n\n");
    const bool entropy = c.budget_control == BudgetControl::kEntropy;
    const std::string line =
        absl::StrCat(" lc rgb '", Color(c.ranking), "' dt ", entropy ? 2 : 1,
                     " pt ", PointType(c), " ps 1.1 lw ",
                     c.ranking == Ranking::kAffinity ? 2.5 : 1.5);
    const std::string style =
        absl::StrCat(line, " title '", PolicyName(c), "'");
    const std::string source = absl::StrCat("'", dat_path, "' index ", i);
    if (!Outlier(c)) {
      panels.a.push_back(
          absl::StrCat(source, " using 2:3:4:5 with yerrorlines", style));
      if (i != r.ref) {
        panels.b.push_back(absl::StrCat(
            source, " using 2:6:7:8 with yerrorlines", line, " notitle"));
      }
    }
    panels.c.push_back(
        absl::StrCat(source, " using 2:9 with linespoints", style));
  }
  return panels;
}

std::string PlotScript(const ProtocolResult& r, const std::string& png,
                       const Panels& panels, const DiffRange& range) {
  const std::vector<int64_t>& targets = r.targets;
  const double full_ppl = r.full_test_ppl;
  return absl::StrCat(
      "set terminal pngcairo size 1800,620 font 'sans,10'\n"
      "set output '",
      png,
      "'\n"
      "set multiplot layout 1,3 title 'stories260K, ",
      r.split.test.size(),
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
      absl::StrJoin(panels.a, ", \\\n     "), "\n",
      "set title 'difference against window+fixed at the same mean live, %",
      range.clipped ? " (h2o off the scale: left panel)" : "",
      "'\nset ylabel '% perplexity over window+fixed (below 0: better)'\n"
      "set yrange [",
      Num(range.lo - 0.3, 2), ":", Num(range.hi + 0.3, 2),
      "]\n"
      "plot 0 with lines lc rgb '#000000' lw 1 notitle, ",
      absl::StrJoin(panels.b, ", \\\n     "), "\n",
      "set title 'every policy, perplexity (log scale)'\n"
      "set ylabel 'perplexity'\nset logscale y\nset yrange [",
      Num(0.95 * full_ppl, 3),
      ":*]\nset key top right "
      "font 'sans,8'\n"
      "plot ",
      absl::StrJoin(panels.c, ", \\\n     "), ", ", Num(full_ppl, 5),
      " with lines lc rgb '#000000' dt 3 title 'full cache'\n"
      "unset multiplot\n");
}

}  // namespace

absl::Status PlotProtocol(const std::filesystem::path& out_dir,
                          const ProtocolResult& r) {
  const DiffRange range = DifferenceRange(r);
  const std::string dat_path =
      (out_dir / "tinystories_ppl_vs_live.dat").string();
  const Panels panels = MakePanels(r, dat_path);
  const std::string png = (out_dir / "tinystories_ppl_vs_live.png").string();
  return WritePlot(out_dir, panels.dat, PlotScript(r, png, panels, range));
}

}  // namespace entrokv::tinyllama
