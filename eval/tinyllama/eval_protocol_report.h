// The protocol's output (eval_protocol.h): the Markdown report it prints and
// writes to tinystories_report.md, tinystories_protocol.csv (a row per
// policy and target on the test stories, at equal mean live and then, with
// --equal_peak, at equal peak; then the tuning candidates),
// tinystories_runs.csv (every run), tinystories_results.json, and the
// three-panel plot tinystories_ppl_vs_live.png (eval_protocol_plot.cc).
//
// Thread-safety: pure functions of the result, but for PlotProtocol, which
// writes files and runs gnuplot.

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_REPORT_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_REPORT_H_

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tinyllama/eval_protocol.h"

namespace entrokv::tinyllama {

std::string ProtocolReport(const ProtocolResult& r);

// Parts of the report (eval_protocol_report_compare.cc).
// A difference against the reference: "+0.12 [-0.10, +0.30] *".
std::string DiffCell(const PairedDifference& d);
// At each target, the policies significantly better than the reference,
// worse, and neither, by `diffs` of `points` against the reference's point.
void AppendVerdict(const ProtocolResult& r,
                   const std::vector<std::vector<Point>>& points,
                   const std::vector<std::vector<PairedDifference>>& diffs,
                   std::string* md);
// Long-range perplexity at equal mean live (nothing when not measured).
void AppendLongPerplexity(const ProtocolResult& r, std::string* md);
// Perplexity and LongPPL at equal peak live (nothing without --equal_peak).
void AppendEqualPeak(const ProtocolResult& r, std::string* md);
std::string ProtocolCsv(const ProtocolResult& r);
std::string ProtocolRunsCsv(const ProtocolResult& r);
std::string ProtocolJson(const ProtocolResult& r);

// Three panels: the competitive policies' perplexity over the full cache and
// their difference against the reference (both with bootstrap intervals),
// and every policy on a log scale (keynorm and random live only there).
// Writes the data and gnuplot script into `out_dir` and draws the PNG.
absl::Status PlotProtocol(const std::filesystem::path& out_dir,
                          const ProtocolResult& r);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_REPORT_H_
