// The server process's own counters, read from /proc when the load generator
// runs on the server's host: CPU time and context switches, sampled between
// phases so that each mode's share is known (docs/performance.md).
//
// Thread-safety: functions only; each reads /proc afresh.

#ifndef ENTROKV_TOOLS_LOADGEN_SERVER_PROCESS_H_
#define ENTROKV_TOOLS_LOADGEN_SERVER_PROCESS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace entrokv::loadgen {

struct ProcessSample {
  double cpu_seconds = 0.0;  // User + system, every thread's since the start.
  // Voluntary + involuntary, summed over the threads alive now (a thread that
  // has exited takes its count with it).
  int64_t context_switches = 0;
};

// The pid of the process that listens on `target` when it is a unix socket
// ("unix:/path", "unix:///path"), found with SO_PEERCRED on a fresh
// connection; nullopt for any other target or when none answers.
std::optional<int> PeerPidOfTarget(const std::string& target);

// Process `pid`'s counters; nullopt when /proc has none readable for it.
std::optional<ProcessSample> SampleProcess(int pid);

// The sum of the voluntary_ctxt_switches and nonvoluntary_ctxt_switches lines
// of a /proc/<pid>/task/<tid>/status text; nullopt when either is missing.
std::optional<int64_t> ParseContextSwitches(absl::string_view status);

}  // namespace entrokv::loadgen

#endif  // ENTROKV_TOOLS_LOADGEN_SERVER_PROCESS_H_
