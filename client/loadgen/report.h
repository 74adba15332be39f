// Load-test measurements and their report: per-mode latency percentiles,
// throughput, bytes each way, evictions per step and a status-code histogram,
// as text or JSON. Pure data and functions; a ModeStats is filled by one
// thread and merged under the caller's lock.

#ifndef ENTROKV_CLIENT_LOADGEN_REPORT_H_
#define ENTROKV_CLIENT_LOADGEN_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace entrokv::loadgen {

// Steps the client library decided locally (its fallback, --client=library)
// are not server answers: they count in `fallbacks` only, never in the
// latency, server time, evictions or status codes.
struct ModeStats {
  std::vector<int64_t> latency_ns;  // One per step the server answered OK.
  std::vector<int64_t> server_ns;   // entrokv only: server compute per step.
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t evicted = 0;                   // By the server's answers.
  int64_t fallbacks = 0;                 // --client=library only.
  std::map<std::string, int64_t> codes;  // Status code name -> steps.
  double wall_seconds = 0.0;             // Sum of this mode's phase durations.

  void Merge(const ModeStats& other);
};

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
  std::string client;         // "sync" or "library"
  int64_t request_bytes = 0;  // Serialized decode request per step.
  // Steps per message (--batch): each latency sample is one message, which
  // answers `batch` steps.
  int batch = 1;
};

// Text report (stdout) or JSON. `modes` maps "entrokv"/"echo" to stats.
std::string FormatText(const RunDescription& run,
                       std::map<std::string, ModeStats>& modes);
std::string FormatJson(const RunDescription& run,
                       std::map<std::string, ModeStats>& modes);

}  // namespace entrokv::loadgen

#endif  // ENTROKV_CLIENT_LOADGEN_REPORT_H_
