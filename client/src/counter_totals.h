// CounterTotals: the sum of the SessionCounters of every session one Client
// made, and histograms of their step latencies, for an engine that exports
// one set of metrics (entrokv/client/metrics.h). Internal to the client
// library.
//
// Thread-safety: thread-safe; sessions on any thread add their deltas.

#ifndef ENTROKV_CLIENT_SRC_COUNTER_TOTALS_H_
#define ENTROKV_CLIENT_SRC_COUNTER_TOTALS_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "entrokv/client/metrics.h"
#include "entrokv/client/session.h"

namespace entrokv::client_internal {

class CounterTotals {
 public:
  // Adds `after - before`, field by field.
  void AddDelta(const SessionCounters& before, const SessionCounters& after);
  SessionCounters Snapshot() const;

  // Counts one step's latency, from its send to its result: `local` for a
  // step decided locally, else one the server answered. Lock-free.
  void ObserveLatency(absl::Duration latency, bool local);
  // The counters and both histograms.
  ClientMetrics Metrics() const;

  // The number of fields of SessionCounters; each is summed.
  static constexpr int kFields = 15;
  // Upper bounds of the latency buckets, in nanoseconds (50 us to 2.5 s);
  // ClientMetrics::LatencyBoundsSeconds() gives the same in seconds.
  static constexpr std::array<int64_t, 15> kLatencyBoundsNs = {
      50'000,      100'000,     250'000,     500'000,       1'000'000,
      2'500'000,   5'000'000,   10'000'000,  25'000'000,    50'000'000,
      100'000'000, 250'000'000, 500'000'000, 1'000'000'000, 2'500'000'000};

 private:
  struct Histogram {
    std::array<std::atomic<int64_t>, kLatencyBoundsNs.size() + 1> counts = {};
    std::atomic<int64_t> sum_ns{0};
  };
  static LatencyHistogram Read(const Histogram& histogram);

  std::atomic<int64_t> fields_[kFields] = {};
  Histogram server_latency_;
  Histogram local_latency_;
};

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_COUNTER_TOTALS_H_
