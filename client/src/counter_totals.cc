#include "counter_totals.h"

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

}  // namespace entrokv::client_internal
