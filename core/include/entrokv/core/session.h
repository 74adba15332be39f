// SessionState: one sequence's eviction state, on one backend.
//
// A session holds the keys of its live entries (in the session's element type),
// the per-entry state of its ranking and the budget controller's running
// entropy statistics. Each Step() appends the entries the engine added since
// the previous step, scores every live entry against the step's queries,
// updates the policy state, and evicts the lowest-ranked unprotected entries
// until the live count fits the step's budget (docs/design.md "One step").
//
// Step() validates its whole input before touching any state: a rejected step
// leaves the session exactly as it was (a later step sees no trace of it).
//
// Thread-safety: a session is not thread-safe; it is owned by one caller (in
// the server, one stream) at a time. Distinct sessions are independent.

#ifndef ENTROKV_CORE_SESSION_H_
#define ENTROKV_CORE_SESSION_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "entrokv/core/config.h"

namespace entrokv {

// The entries appended since the previous step.
struct AppendBatch {
  absl::Span<const uint64_t> slot_ids;  // The engine's ids; unique among live.
  absl::Span<const uint8_t> pinned;     // Empty, or one flag per slot id.
  // slot_ids.size() * shape.key_elements() elements of shape.element_type,
  // laid out [entry][layer][kv_head][head_dim], little-endian.
  absl::Span<const std::byte> keys;
};

struct StepInput {
  uint64_t step = 0;  // Strictly greater than the previous accepted step.
  AppendBatch append;
  // shape.query_elements() elements of shape.element_type, laid out
  // [layer][q_head][head_dim].
  absl::Span<const std::byte> queries;
  // The next-token entropy in nats, or else the logits it is computed from.
  // Required when PolicyNeedsEntropy(); may be absent otherwise.
  std::optional<double> entropy;
  absl::Span<const float> logits;
};

// With a demote tier (SessionConfig::tier, docs/step-semantics.md section
// 12) the three lists are the step's net moves, disjoint, each in append
// order; without one, `demoted` and `promoted` are empty.
struct StepResult {
  // Dropped for good, in append order, oldest first: from the device, or,
  // with a tier, from the device or the tier.
  std::vector<uint64_t> evicted;
  std::vector<uint64_t> demoted;   // Device to tier.
  std::vector<uint64_t> promoted;  // Tier to device.
  int64_t live = 0;      // Live (device) entries after the step's moves.
  int64_t budget = 0;    // The step's effective budget B_t.
  double entropy = 0.0;  // The entropy used (0 when none was sent).
  // True when the step made no decision (decide_every > 1 and not a decision
  // step): its entries were recorded, nothing was scored or evicted.
  bool deferred = false;
};

// Optional per-step detail for tests, metrics and backend comparisons. Every
// vector is indexed like `slots`: the live entries after the step's appends,
// before its evictions, in append order; with a demote tier, every held
// entry (live and demoted), and `demoted` is filled.
struct StepTrace {
  std::vector<uint64_t> slots;
  std::vector<float> mean_logit;    // s_i = mean over (l, h) of z[l,h,i].
  std::vector<float> attention;     // a_i = mean over (l, h) of softmax_i.
  std::vector<double> rank_score;   // The ranking's keep score (higher: keep).
  std::vector<uint8_t> protected_;  // 1 when sinks/recent/pinned protect it.
  // With a tier: 1 when the entry was in the tier at the step's start.
  // Empty without one.
  std::vector<uint8_t> demoted;
};

struct SessionStats {
  int64_t live = 0;
  int64_t peak_live = 0;
  int64_t steps = 0;  // Accepted steps.
  std::optional<uint64_t> last_step;
  int64_t appended = 0;  // Entries ever appended.
  int64_t evicted = 0;   // Entries ever evicted (dropped for good).
  // Demote tier (section 12): entries in the tier now, and the moves ever
  // answered.
  int64_t tier_held = 0;
  int64_t demoted = 0;
  int64_t promoted = 0;
  int64_t budget = 0;    // Budget of the last step (config budget before any).
  int64_t bytes_held = 0;
  // Bytes of key and query data the steps have written, in any form, into
  // buffers: decoded copies, scaled and summed queries, pending and partial
  // blocks, staging buffers, key storage (appends, growth and compaction)
  // and host-to-device copies. Bytes only read in place are not counted.
  // docs/design.md, "One path for the bytes".
  int64_t bytes_copied = 0;
  Placement placement = Placement::kCpu;  // kCpu or kGpu: where it lives.
};

// Limits set by the operator (server flags), not by the engine.
struct SessionLimits {
  // 0: unlimited. Checked at append; with a demote tier it bounds the held
  // entries, live and demoted.
  int64_t max_live_entries = 0;
};

class SessionState {
 public:
  virtual ~SessionState() = default;

  virtual const SessionConfig& config() const = 0;

  // Runs one step. On error the session is unchanged and `result` untouched.
  // Errors: InvalidArgument (bad shape, byte length, NaN/Inf, missing entropy,
  // duplicate slot id), FailedPrecondition (step number not increasing),
  // ResourceExhausted (max_live_entries or the backend's byte limit).
  // REQUIRES: result != nullptr.
  virtual absl::Status Step(const StepInput& input, StepResult* result,
                            StepTrace* trace = nullptr) = 0;

  virtual SessionStats Stats() const = 0;

  // The live slot ids in append order (with a tier: on the device).
  virtual std::vector<uint64_t> LiveSlots() const = 0;

  // The slot ids in the demote tier, in append order; empty without one.
  virtual std::vector<uint64_t> DemotedSlots() const { return {}; }
};

}  // namespace entrokv

#endif  // ENTROKV_CORE_SESSION_H_
