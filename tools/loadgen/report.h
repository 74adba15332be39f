// Load-test measurements and their report: per-mode latency percentiles,
// throughput, bytes each way, evictions per step, a status-code histogram and
// the failures by status code, as text or JSON. Pure data and functions; a
// ModeStats is filled by one thread and merged under the caller's lock.
//
// Every planned step ends as exactly one of: answered OK by the server (a
// latency sample), answered or ended with an error (`codes`, not OK), not
// sent because its stream had ended or its session never started
// (`not_sent`), or decided locally by the client library (`fallbacks`). The
// last three are the run's failed steps.

#ifndef ENTROKV_CLIENT_LOADGEN_REPORT_H_
#define ENTROKV_CLIENT_LOADGEN_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "policy_table.h"

namespace entrokv::loadgen {

// Steps the client library decided locally (its fallback, --client=library)
// are not server answers: they count in `fallbacks` only, never in the
// latency, server time, evictions or status codes.
struct ModeStats {
  // One per step (per message with --batch) the server answered OK.
  std::vector<int64_t> latency_ns;
  std::vector<int64_t> server_ns;  // entrokv only: server compute per step.
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t evicted = 0;  // By the server's answers.
  // Steps sent, by the status they got: OK, the server's rejection, or the
  // status of the stream that ended while the step was in flight.
  std::map<std::string, int64_t> codes;
  // Steps never sent, by the status that ended their stream (or that their
  // session's start failed with).
  std::map<std::string, int64_t> not_sent;
  int64_t fallbacks = 0;  // --client=library only.
  // Fallback steps by the status code of the session's degraded reason
  // (DEADLINE_EXCEEDED: a missed step deadline; UNAVAILABLE, CANCELLED, ...:
  // the stream broke).
  std::map<std::string, int64_t> fallback_causes;
  double wall_seconds = 0.0;  // Sum of this mode's phase durations.
  // The server process's CPU seconds and context switches during this mode's
  // phases (server_process.h), when the load generator could read them.
  // A phase whose counters could not be read (or were another process's)
  // counts in server_unsampled_phases, and the mode then reports none.
  bool server_sampled = false;
  int64_t server_unsampled_phases = 0;
  double server_cpu_seconds = 0.0;
  int64_t server_context_switches = 0;
  // The load generator's own CPU seconds during this mode's phases, every
  // thread (CLOCK_PROCESS_CPUTIME_ID): with the server's, where the cores
  // went when both run on one machine.
  double loadgen_cpu_seconds = 0.0;

  void Merge(const ModeStats& other);
  // Steps not answered OK by the server: not-OK codes, not sent, fallbacks.
  int64_t FailedSteps() const;
  // The failed steps by status code (fallbacks by their cause).
  std::map<std::string, int64_t> FailuresByCode() const;
};

// Failures that are not steps, by status code name.
struct RunFailures {
  std::map<std::string, int64_t> sessions_not_started;
  std::map<std::string, int64_t> closes_failed;
};

// True when any step failed, a session did not start or a close failed.
bool AnyFailure(const std::map<std::string, ModeStats>& modes,
                const RunFailures& failures);

struct Percentiles {
  double p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0,
         mean_us = 0;
};
// Nearest-rank percentiles of `ns` (sorted in place).
Percentiles ComputePercentiles(std::vector<int64_t>* ns);

struct RunDescription {
  std::string target;
  std::string shape;  // "layers=4 kv_heads=2 q_heads=8 head_dim=64 f16"
  std::string policy;
  int64_t budget = 0;
  int sessions = 0;
  int prefill = 0;
  int rounds = 0;
  int steps_per_round = 0;
  double rate = 0.0;          // Steps/s over all sessions; 0: closed loop.
  std::string client;         // "sync", "library" or "library-callback"
  int64_t request_bytes = 0;  // Serialized decode request per step.
  // Steps per message (--batch): each latency sample is one message, which
  // answers `batch` steps.
  int batch = 1;
  // With batch > 1, how a thread steps its batch (--batch_calls): "batch",
  // "session" or "pipelined" (a message's answers read one iteration after
  // it was sent, so its latency includes that iteration).
  std::string batch_calls = "batch";
  // Steps planned over all sessions and modes.
  int64_t planned_steps = 0;
  // The server's pid when its process counters were read (server_process.h).
  int server_pid = 0;
  // With --shadows: the table of policies (policy_table.h); else empty.
  std::vector<PolicyRow> policies;
};

// Text report (stdout) or JSON. `modes` maps "entrokv"/"echo" to stats.
std::string FormatText(const RunDescription& run,
                       std::map<std::string, ModeStats>& modes,
                       const RunFailures& failures);
std::string FormatJson(const RunDescription& run,
                       std::map<std::string, ModeStats>& modes,
                       const RunFailures& failures);

}  // namespace entrokv::loadgen

#endif  // ENTROKV_CLIENT_LOADGEN_REPORT_H_
