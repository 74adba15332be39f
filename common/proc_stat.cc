#include "common/proc_stat.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace entrokv {

std::optional<ProcStat> ParseProcStat(absl::string_view text) {
  const size_t close = text.rfind(')');
  if (close == absl::string_view::npos) return std::nullopt;
  // Fields 3 (state) on; fields[i] is field i + 3.
  const std::vector<absl::string_view> fields =
      absl::StrSplit(text.substr(close + 1), ' ', absl::SkipWhitespace());
  if (fields.size() < 22) return std::nullopt;
  ProcStat stat;
  // utime 14, stime 15, starttime 22, vsize 23, rss 24.
  if (!absl::SimpleAtoi(fields[14 - 3], &stat.utime_ticks) ||
      !absl::SimpleAtoi(fields[15 - 3], &stat.stime_ticks) ||
      !absl::SimpleAtoi(fields[22 - 3], &stat.start_ticks) ||
      !absl::SimpleAtoi(fields[23 - 3], &stat.vsize_bytes) ||
      !absl::SimpleAtoi(fields[24 - 3], &stat.rss_pages)) {
    return std::nullopt;
  }
  return stat;
}

std::optional<std::string> ReadProcFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace entrokv
