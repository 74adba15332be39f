// The process_* metrics of the Prometheus client libraries (client_golang's
// process collector), read from /proc when a scrape comes:
//
//   process_cpu_seconds_total      user + system CPU time (/proc/self/stat)
//   process_resident_memory_bytes  resident set size (/proc/self/stat)
//   process_virtual_memory_bytes   virtual memory size (/proc/self/stat)
//   process_open_fds               entries of /proc/self/fd
//   process_max_fds                the soft RLIMIT_NOFILE
//   process_start_time_seconds     start, seconds since the Unix epoch
//                                  (/proc/stat btime + the start in ticks)
//
// A value that cannot be read (no /proc) is left out, not reported as 0.
//
// Thread-safety: the functions are thread-safe.

#ifndef ENTROKV_SERVER_PROCESS_METRICS_H_
#define ENTROKV_SERVER_PROCESS_METRICS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "common/proc_stat.h"

namespace entrokv::server {

// The boot time, seconds since the epoch, from the text of /proc/stat
// ("btime N"); nullopt when absent.
std::optional<int64_t> ParseBootTime(absl::string_view text);

// Appends the metrics above, HELP and TYPE lines included.
void AppendProcessMetrics(std::string* out);

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_PROCESS_METRICS_H_
