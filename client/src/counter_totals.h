// CounterTotals: the sum of the SessionCounters of every session one Client
// made, for an engine that exports one set of metrics. Internal to the client
// library.
//
// Thread-safety: thread-safe; sessions on any thread add their deltas.

#ifndef ENTROKV_CLIENT_SRC_COUNTER_TOTALS_H_
#define ENTROKV_CLIENT_SRC_COUNTER_TOTALS_H_

#include <atomic>
#include <cstdint>

#include "entrokv/client/session.h"

namespace entrokv::client_internal {

class CounterTotals {
 public:
  // Adds `after - before`, field by field.
  void AddDelta(const SessionCounters& before, const SessionCounters& after);
  SessionCounters Snapshot() const;

  // The number of fields of SessionCounters; each is summed.
  static constexpr int kFields = 15;

 private:
  std::atomic<int64_t> fields_[kFields] = {};
};

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_COUNTER_TOTALS_H_
