// The synthetic workload: what each session sends (prefill chunks and a pool
// of decode steps, drawn from core's SyntheticStream and encoded in the wire
// element type), the messages built from it, and the pacing of the steps.
// Pure functions of their arguments, but PaceStep(), which sleeps.

#ifndef ENTROKV_TOOLS_LOADGEN_WORKLOAD_H_
#define ENTROKV_TOOLS_LOADGEN_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "entrokv/client/session.h"
#include "entrokv/client/vectors.h"
#include "entrokv/core/config.h"
#include "entrokv/v1/entrokv.pb.h"

namespace entrokv::loadgen {

// Slot ids of a session start here and count up.
inline constexpr uint64_t kSlotBase = 1'000'000;

// One decode step's entry and query, in the wire element type.
struct PoolStep {
  std::string key;  // One entry.
  std::string query;
  double entropy;
};

// What one session sends: prefill chunks and a pool of decode steps.
struct SessionData {
  std::vector<std::string> prefill_keys;  // Per chunk.
  std::vector<int> prefill_counts;
  std::string prefill_query;
  double prefill_entropy = 1.0;
  std::vector<PoolStep> pool;
};

// `prefill` entries in chunks of `chunk`, then `pool` decode steps, from the
// synthetic stream of `seed` for `config`'s shape.
SessionData MakeData(const SessionConfig& config, int prefill, int chunk,
                     int pool, uint64_t seed);

// `out` as one step of `count` new entries at slots first_slot, ...
void FillStep(const std::string& id, uint64_t step, uint64_t first_slot,
              int count, const std::string& keys, const std::string& query,
              double entropy, v1::SessionStep* out);

// The client library's request for the same step. It points into `slots`,
// `keys` and `query`, which must outlive it.
StepRequest MakeStepRequest(ElementType type, absl::Span<const uint64_t> slots,
                            const std::string& keys, const std::string& query,
                            double entropy);

// The serialized size of one decode request of one entry for `config`.
int64_t DecodeRequestBytes(const SessionConfig& config);

// The serialized size of a typical step result (one evicted slot) for
// `config`: what an Echo reply stands in for.
int64_t TypicalResultBytes(const SessionConfig& config);

// Open loop (`rate` > 0 messages/s of one thread): waits for message k's
// scheduled time after `phase_start` and returns it; closed loop: returns
// now.
absl::Time PaceStep(double rate, absl::Time phase_start, int k);

}  // namespace entrokv::loadgen

#endif  // ENTROKV_TOOLS_LOADGEN_WORKLOAD_H_
