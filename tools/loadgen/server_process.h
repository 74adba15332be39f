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

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace entrokv::loadgen {

struct ProcessSample {
  double cpu_seconds = 0.0;  // User + system, every thread's since the start.
  int64_t start_ticks = 0;   // The process's start: tells a reused pid.
  // Per thread alive now: voluntary + involuntary context switches.
  absl::flat_hash_map<int64_t, int64_t> switches_by_thread;
};

// The context switches made between `before` and `after`: the growth of
// each thread seen in both, and the whole count of each thread new in
// `after`. A thread that exited between them takes its last switches with
// it (an undercount).
int64_t SwitchesSince(const ProcessSample& before, const ProcessSample& after);

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
