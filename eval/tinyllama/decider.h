// Decider: where the example engine's eviction decisions come from.
//
// The engine reports every decode step (the new entry's slot id and keys, the
// step's queries, the next-token entropy) to a DeciderSession and frees the
// slots it answers (with a demote tier, also moves slots to and from its
// host tier). Two implementations: in process, over entrokv core's
// SessionState (CreateInProcessDecider), and over gRPC through the client
// library (grpc_decider.h, built only with the client library). Both see the
// same inputs, so they must answer the same evictions, and with a demote tier
// (SessionConfig::tier) the same demotions and promotions.
//
// The engine always reports its full vectors: every model layer, every q head,
// head_dim columns. A session's configuration may ask for less
// (SessionConfig::scored_layers, Shape::sketch_dim, Shape::query_form,
// decide_every); each decider then sends what the configuration names, as an
// engine would: only the scored layers (SelectScoredLayers, in
// scoring_variant.h), projected and group-summed by entrokv::Sketcher (the
// in-process decider applies it itself, the client library does for the gRPC
// one), and no queries or entropy on a step that decides nothing.
//
// Thread-safety: a Decider's Open() is thread-safe; a DeciderSession belongs to
// one decode loop.

#ifndef ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_DECIDER_H_
#define ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_DECIDER_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "scoring_variant.h"

namespace entrokv::tinyllama {

// One decode step, as the engine reports it: one appended entry.
struct DecisionRequest {
  uint64_t step = 0;  // Strictly increasing within a session.
  uint64_t slot = 0;  // The new entry's slot id.
  // The new entry's post-RoPE keys, [layer][kv_head][head_dim], f32, for
  // every model layer.
  absl::Span<const float> keys;
  // The step's post-RoPE queries, [layer][q_head][head_dim], f32, for every
  // model layer.
  absl::Span<const float> queries;
  double entropy = 0.0;  // H(p_t) in nats.
};

struct Decision {
  // Slots to free for good (live or demoted), oldest first.
  std::vector<uint64_t> evicted;
  // With a demote tier (SessionConfig::tier, docs/step-semantics.md section
  // 12), slots to move from the device to the host tier and back, oldest
  // first; the engine applies `evicted`, then `demoted`, then `promoted`.
  // Empty without a tier.
  std::vector<uint64_t> demoted;
  std::vector<uint64_t> promoted;
  int64_t live = 0;  // Live (device) entries after the step's moves.
  int64_t budget = 0;             // The step's effective budget B_t.
  // The step made no decision (decide_every > 1, not a decision step).
  bool deferred = false;
  // Attention recall of the step (docs/design.md "Shadow policies"): the
  // share of its attention mass, over every entry appended so far, that
  // falls on the live set after the step, and on the oracle's top-`budget`
  // set. NaN unless the decider measures recall and the step was scored (a
  // step with queries).
  double recall = std::numeric_limits<double>::quiet_NaN();
  double oracle_recall = std::numeric_limits<double>::quiet_NaN();
};

class DeciderSession {
 public:
  virtual ~DeciderSession() = default;
  virtual absl::Status Step(const DecisionRequest& request,
                            Decision* decision) = 0;
  // Ends the session (the server frees its state). Idempotent.
  virtual absl::Status Close() = 0;
};

class Decider {
 public:
  virtual ~Decider() = default;
  // "inprocess:cpu", "grpc:localhost:50051", ...
  virtual std::string Describe() const = 0;
  // Opens a session for one sequence. `config.shape` describes the session's
  // wire form (f32; layers = the scored layers' count, head_dim the model's,
  // sketch_dim and query_form as wanted); requests carry the engine's full
  // vectors.
  virtual absl::StatusOr<std::unique_ptr<DeciderSession>> Open(
      const SessionConfig& config) = 0;
};

// Decisions from entrokv core in this process, on `kind`'s backend. With
// `measure_recall`, each session also runs a ShadowSet without shadows (the
// server's shadowing code, core/shadow.h) over every entry of the sequence,
// and every decision step reports Decision::recall and oracle_recall.
absl::StatusOr<std::unique_ptr<Decider>> CreateInProcessDecider(
    BackendKind kind = BackendKind::kCpu, bool measure_recall = false);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_DECIDER_H_
