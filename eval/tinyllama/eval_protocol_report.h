// The protocol's output (eval_protocol.h): the Markdown report it prints and
// writes to tinystories_report.md, tinystories_protocol.csv (a row per
// policy and target on the test stories, then the tuning candidates),
// tinystories_runs.csv (every run), tinystories_results.json, and the
// three-panel plot tinystories_ppl_vs_live.png (eval_protocol_plot.cc).
//
// Thread-safety: pure functions of the result, but for PlotProtocol, which
// writes files and runs gnuplot.

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_REPORT_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_REPORT_H_

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "tinyllama/eval_protocol.h"

namespace entrokv::tinyllama {

std::string ProtocolReport(const ProtocolResult& r);
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
