// Reading a process's /proc files: shared by the server's process_* metrics
// (server/process_metrics.h) and the load generator's view of the server
// (tools/loadgen/server_process.h).
//
// Thread-safety: the functions are thread-safe.

#ifndef ENTROKV_COMMON_PROC_STAT_H_
#define ENTROKV_COMMON_PROC_STAT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace entrokv {

// The fields of /proc/<pid>/stat the metrics use, in their own units.
struct ProcStat {
  int64_t utime_ticks = 0;
  int64_t stime_ticks = 0;
  int64_t start_ticks = 0;  // After boot.
  int64_t vsize_bytes = 0;
  int64_t rss_pages = 0;
};

// Parses the text of /proc/<pid>/stat (proc(5)); nullopt when malformed.
// The command name (field 2) may hold spaces and parentheses: the fields
// after it are counted from its last ')'.
std::optional<ProcStat> ParseProcStat(absl::string_view text);

// The whole content of `path` (a small kernel file: /proc, /sys), or nullopt
// when unreadable.
std::optional<std::string> ReadProcFile(const std::string& path);

}  // namespace entrokv

#endif  // ENTROKV_COMMON_PROC_STAT_H_
