#include "counter_totals.h"

#include <algorithm>
#include <array>

namespace entrokv::client_internal {
namespace {

// Every field of SessionCounters is an int64_t listed below: a field added
// there and not here would not be summed.
static_assert(sizeof(SessionCounters) ==
              CounterTotals::kFields * sizeof(int64_t));

// The fields of SessionCounters, in a fixed order.
std::array<int64_t SessionCounters::*, CounterTotals::kFields> Fields() {
  return {&SessionCounters::steps,
          &SessionCounters::server_steps,
          &SessionCounters::fallback_steps,
          &SessionCounters::fallback_deadline,
          &SessionCounters::fallback_unavailable,
          &SessionCounters::fallback_degraded,
          &SessionCounters::rejected_steps,
          &SessionCounters::evicted_by_server,
          &SessionCounters::evicted_by_fallback,
          &SessionCounters::bytes_sent,
          &SessionCounters::bytes_received,
          &SessionCounters::offline_sessions,
          &SessionCounters::unconfirmed_closes,
          &SessionCounters::recovery_attempts,
          &SessionCounters::recoveries};
}

}  // namespace

void CounterTotals::AddDelta(const SessionCounters& before,
                             const SessionCounters& after) {
  const auto fields = Fields();
  for (int i = 0; i < kFields; ++i) {
    const int64_t delta = after.*fields[i] - before.*fields[i];
    if (delta != 0) fields_[i].fetch_add(delta, std::memory_order_relaxed);
  }
}

SessionCounters CounterTotals::Snapshot() const {
  SessionCounters out;
  const auto fields = Fields();
  for (int i = 0; i < kFields; ++i) {
    out.*fields[i] = fields_[i].load(std::memory_order_relaxed);
  }
  return out;
}

void CounterTotals::ObserveLatency(absl::Duration latency, bool local) {
  const int64_t ns = std::max<int64_t>(0, absl::ToInt64Nanoseconds(latency));
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(kLatencyBoundsNs.begin(), kLatencyBoundsNs.end(), ns) -
      kLatencyBoundsNs.begin());
  Histogram& histogram = local ? local_latency_ : server_latency_;
  histogram.counts[bucket].fetch_add(1, std::memory_order_relaxed);
  histogram.sum_ns.fetch_add(ns, std::memory_order_relaxed);
}

LatencyHistogram CounterTotals::Read(const Histogram& histogram) {
  LatencyHistogram out;
  out.upper_bounds = ClientMetrics::LatencyBoundsSeconds();
  out.counts.reserve(histogram.counts.size());
  for (const std::atomic<int64_t>& count : histogram.counts) {
    out.counts.push_back(count.load(std::memory_order_relaxed));
  }
  out.sum_seconds =
      static_cast<double>(histogram.sum_ns.load(std::memory_order_relaxed)) /
      1e9;
  return out;
}

ClientMetrics CounterTotals::Metrics() const {
  ClientMetrics metrics;
  metrics.counters = Snapshot();
  metrics.server_latency = Read(server_latency_);
  metrics.local_latency = Read(local_latency_);
  return metrics;
}

}  // namespace entrokv::client_internal
