#include "server/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/proc_stat.h"

namespace entrokv::server {
namespace {


void Metric(std::string* out, absl::string_view name, absl::string_view type,
            absl::string_view help, absl::string_view value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type,
                  "\n", name, " ", value, "\n");
}

std::optional<int64_t> OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  int64_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // The directory stream's own descriptor.
}

}  // namespace


std::optional<int64_t> ParseBootTime(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      int64_t seconds = 0;
      if (absl::SimpleAtoi(line, &seconds)) return seconds;
    }
  }
  return std::nullopt;
}

void AppendProcessMetrics(std::string* out) {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const std::optional<std::string> stat_text = ReadProcFile("/proc/self/stat");
  const std::optional<ProcStat> stat =
      stat_text ? ParseProcStat(*stat_text) : std::nullopt;
  if (stat) {
    Metric(out, "process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.",
           absl::StrFormat("%.2f",
                           (stat->utime_ticks + stat->stime_ticks) / ticks));
    Metric(out, "process_resident_memory_bytes", "gauge",
           "Resident memory size in bytes.",
           absl::StrCat(stat->rss_pages * sysconf(_SC_PAGESIZE)));
    Metric(out, "process_virtual_memory_bytes", "gauge",
           "Virtual memory size in bytes.", absl::StrCat(stat->vsize_bytes));
  }
  if (const std::optional<int64_t> fds = OpenFds()) {
    Metric(out, "process_open_fds", "gauge", "Number of open file descriptors.",
           absl::StrCat(*fds));
  }
  if (rlimit limit; getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    Metric(out, "process_max_fds", "gauge",
           "Maximum number of open file descriptors.",
           absl::StrCat(limit.rlim_cur));
  }
  const std::optional<std::string> proc_stat = ReadProcFile("/proc/stat");
  const std::optional<int64_t> boot =
      proc_stat ? ParseBootTime(*proc_stat) : std::nullopt;
  if (stat && boot) {
    Metric(out, "process_start_time_seconds", "gauge",
           "Start time of the process since unix epoch in seconds.",
           absl::StrFormat("%.2f", *boot + stat->start_ticks / ticks));
  }
}

}  // namespace entrokv::server
