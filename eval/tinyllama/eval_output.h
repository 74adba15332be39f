// The files entrokv-eval writes and the way it prints numbers in them: the
// output folder, whole files, numbers as text (NaN and infinities as
// "null", JSON's spelling of a missing value), JSON strings, the target
// columns of its Markdown tables, and the perplexity-against-live plot drawn
// by gnuplot.
//
// Thread-safety: reentrant; call from one thread per file.

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_OUTPUT_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_OUTPUT_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace entrokv::tinyllama {

// `v` with `precision` decimals; "null" when it is not finite.
std::string Num(double v, int precision = 4);

// `s` quoted, with '"' and '\' escaped.
std::string JsonString(const std::string& s);

// The target columns of a Markdown table whose first column is the policy:
// " live T |" for each target, then the rule row: "|---|" and `rule` (such as
// "---:|") for each target.
std::string TargetColumns(const std::vector<int64_t>& targets,
                          const char* rule);

// Creates `dir` and its parents (nothing when it exists); Unavailable when
// that fails.
absl::Status CreateOutputDir(const std::filesystem::path& dir);

// Writes `text` to `path`, replacing it; Unavailable when that fails.
absl::Status WriteFile(const std::filesystem::path& path,
                       const std::string& text);

// Writes <out_dir>/tinystories_ppl_vs_live.dat and .gp (`data` and `script`)
// and runs gnuplot on the script, which draws the PNG. A gnuplot failure is
// reported on stderr and is not an error: the data and script stay.
absl::Status WritePlot(const std::filesystem::path& out_dir,
                       const std::string& data, const std::string& script);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_OUTPUT_H_
