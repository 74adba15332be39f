// Shadow policies: which eviction policy pays on the traffic a session sees
// (issue #20; docs/design.md "Shadow policies").
//
// A ShadowSet watches one session (the primary). Each shadow is another
// policy of the same shape that runs, on a CPU session of its own, every
// step the primary accepted, with the same keys, queries and entropy, over a
// live set of its own. Shadows never change the primary's answers: the set
// only reads what the primary was given and what it answered. Entries get
// virtual ids (their append index), so an engine that reuses a slot id the
// primary evicted does not collide with a shadow that still holds it.
//
// The reference: the set keeps the decoded key of every entry appended, up
// to `max_reference_entries` (key_elements() floats each; reference_bytes in
// the stats). On a scored step (a step with queries; one in `score_every`),
// for every (layer, q head) row r the softmax p_r over all the reference's
// entries of z = q·k / sqrt(head_dim) (docs/step-semantics.md §3; under
// group-sum queries a row is a kv head's summed query) gives a_i = mean_r
// p_r(i), and a live set L has attention recall R(L) = Σ_{i in L} a_i: the
// share of the step's attention mass, over every entry held, that falls on
// L. The oracle keeps the top B_t entries by a_i, B_t the primary's budget
// at that step. Once the reference is full, steps are no longer scored.
//
// With a demote tier (docs/step-semantics.md section 12), the primary's or a
// shadow's, a live set is its live (device) entries: demoted ones count in
// no recall.
//
// Not thread-safe: one caller, the primary's stepper, drives it.

#ifndef ENTROKV_CORE_SHADOW_H_
#define ENTROKV_CORE_SHADOW_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"

namespace entrokv {

// What a session asks for: the wire's CreateSessionRequest.shadowing, the
// clients' SessionOptions::shadowing. The server turns it into ShadowOptions
// under its ShadowLimits (ResolveShadowOptions below).
struct ShadowRequest {
  // The shadow policies, as SessionOptions for the primary would give them.
  // The server fills in what they must share with the primary (shape,
  // decide_every, hard_ceiling; see ResolveShadowOptions).
  std::vector<SessionConfig> policies;
  int32_t score_every = 1;             // >= 1.
  int64_t max_reference_entries = 0;   // 0: as many as the server allows.

  bool empty() const { return policies.empty(); }
};

// A server's bounds on shadowing, per session.
struct ShadowLimits {
  int32_t max_shadows = 4;
  // The reference's bytes (key_elements() floats per entry).
  int64_t max_reference_bytes = int64_t{64} << 20;
};

struct ShadowOptions {
  // The shadow policies: each must pass ValidateSessionConfig, and have the
  // primary's shape, decide_every and hard_ceiling (so that it can run on the
  // primary's steps). Placement is ignored: shadows run on the CPU.
  std::vector<SessionConfig> policies;
  int32_t max_shadows = 4;                        // The server's limit.
  int64_t max_reference_entries = int64_t{1} << 16;  // >= 1.
  int32_t score_every = 1;  // Score one step with queries in every N (>= 1).
};

// ShadowOptions for `request` on a session of `primary` under `limits`:
// max_shadows from the limits; max_reference_entries the request's, or the
// most that max_reference_bytes holds when the request asks for more or for
// 0. Errors: InvalidArgument naming the field ("score_every: ...",
// "max_reference_entries: ...", "max_reference_bytes: ... holds no key of
// this shape").
absl::StatusOr<ShadowOptions> ResolveShadowOptions(
    const SessionConfig& primary, const ShadowRequest& request,
    const ShadowLimits& limits);

// The most bytes a ShadowSet of these options holds besides its shadows'
// own states: the reference at capacity, the scoring scratch and the recall
// series (a bound, which the server reserves).
int64_t ShadowBytesAtMost(const SessionConfig& primary,
                          const ShadowOptions& options);

// One scored step's attention recall (Observe's out-parameter).
struct StepRecall {
  double primary = 0.0;
  double oracle = 0.0;
  // Per shadow, in ShadowOptions::policies order; NaN for one that stopped.
  std::vector<double> shadows;
};

// Attention recall over the scored steps.
struct RecallSummary {
  int64_t steps = 0;  // Steps scored.
  double mean = 0.0;
  double p10 = 0.0;  // The 10th percentile (nearest rank).
  double min = 0.0;
};

struct PolicyReport {
  std::string policy;  // PolicyName() of its config; "oracle" for the oracle.
  // Its configuration (the oracle's: the primary's; its budget B_t is the
  // primary's at each step).
  SessionConfig config;
  RecallSummary recall;
  // Mean Jaccard of its live set with the primary's over the scored steps
  // (1 for the primary; 0 for the oracle, whose set is not kept).
  double mean_jaccard = 1.0;
  int64_t live = 0;  // Live entries after the last step it ran.
  // A shadow whose step failed (say, a policy that needs an entropy the
  // primary is not sent) stops there; the error is kept here.
  absl::Status status;
};

struct ShadowStats {
  PolicyReport primary;
  PolicyReport oracle;
  std::vector<PolicyReport> shadows;
  int64_t reference_entries = 0;
  int64_t reference_bytes = 0;
  int64_t reference_capacity = 0;  // ShadowOptions::max_reference_entries.
  // Steps after this are not scored: the reference was full, or as many
  // steps as it holds entries were scored (what bounds the recall series).
  bool reference_full = false;
  int64_t steps_observed = 0;
  int32_t score_every = 1;
  int64_t bytes_held = 0;  // ShadowSet::bytes_held().
};

class ShadowSet {
 public:
  // Errors: InvalidArgument naming the field ("policies[1].budget: ...",
  // "policies: 5 given, at most 4", "max_reference_entries: ...").
  // The shadows' sessions are created on `backend` (a CPU backend: the
  // server passes its own, so that they count toward its bytes), or on a
  // CPU backend of the set's own when null. REQUIRES: `backend` outlives
  // the set.
  static absl::StatusOr<std::unique_ptr<ShadowSet>> Create(
      const SessionConfig& primary, const ShadowOptions& options,
      Backend* backend = nullptr);

  virtual ~ShadowSet() = default;

  // One step the primary accepted: `input` as it was given, `result` as the
  // primary answered it. Returns whether the step was scored, and then
  // fills `scored` when it is not null.
  virtual bool Observe(const StepInput& input, const StepResult& result,
                       StepRecall* scored = nullptr) = 0;

  // The bytes the set holds: the reference, and the shadows' own states
  // (which also count in their backend's bytes_held).
  virtual int64_t bytes_held() const = 0;

  virtual ShadowStats Stats() const = 0;
};

}  // namespace entrokv

#endif  // ENTROKV_CORE_SHADOW_H_
