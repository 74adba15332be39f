// Session: one sequence's connection to the entrokv sidecar, as an inference
// engine's decode loop uses it.
//
// A Session owns one Decode stream attached to one server session (a
// session created through a DecodeBatch shares the batch's stream instead,
// its steps gathered into one message per decode iteration: batch.h). Each
// call sends one step (the entries the engine appended since the previous
// step, the step's queries and the next-token entropy) and yields the slot
// ids the engine must free. Step numbers are assigned by the Session: the first
// step is SessionOptions::first_step (or the server's last step + 1 after
// Attach), and each accepted step advances it by one. A Session made by Attach
// knows the live slots it was given, all unpinned (Attach takes no pinned
// flags): the local rule may evict an entry the server session had pinned, and
// a recovery re-sends it unpinned.
//
// Two ways to drive it:
//  - Blocking: Step() sends and waits for that step's evictions.
//  - Pipelined: StepPipelined() sends step t and returns step t-1's evictions,
//    so that the round trip overlaps the engine's own compute and evictions
//    are applied one step late. StepAsync()/Collect() are the same two halves
//    for engines that want to place them themselves.
// The server's decisions do not depend on when the engine frees slots, so on
// the same inputs the pipelined results are the blocking ones shifted by one
// step.
//
// Failure: the engine never waits on the sidecar for long.
//  - Creation. Client::CreateSession (its RPC and the stream's attach
//    handshake together) waits at most SessionOptions::create_deadline
//    (default 200 ms; through a DecodeBatch with messages in flight, plus
//    the wait for their answers: batch.h). When it fails for a reason that is
//    not the caller's -- the server unreachable or silent (UNAVAILABLE,
//    DEADLINE_EXCEEDED), at a limit (RESOURCE_EXHAUSTED: max sessions, streams,
//    bytes), broken (INTERNAL, UNKNOWN, CANCELLED, ...), or an attach that
//    fails after the server created the session (that server session is then
//    closed in the background) -- it returns an *offline* Session: empty id(),
//    degraded() from the start, degraded_reason() naming the failure, counted
//    in counters().offline_sessions. The caller's own errors (INVALID_ARGUMENT,
//    ALREADY_EXISTS, FAILED_PRECONDITION, NOT_FOUND, ...) are returned.
//    With offline_when_unavailable = false every failure is returned.
//  - Steps. Every step has a deadline (SessionOptions::step_deadline,
//    counted from its send). When it passes, or the stream breaks, or the
//    session is offline, the Session decides locally with the `streaming`
//    rule (keep the sinks, pinned and most recent entries, evict the oldest
//    of the rest down to the budget; see live_set.h) and counts it in
//    counters(). From then on the session is degraded: the server's state no
//    longer matches the engine's cache, so every later step is decided
//    locally too, until a recovery. A session created offline is degraded
//    likewise. (Why a recovery re-sends the live entries rather than telling
//    the server which slots were freed locally: after a missed deadline the
//    server may have run the step and evicted entries the engine kept, whose
//    keys it no longer has; only a resync from the engine's cache restores
//    a matching state in every case.)
//  - Recovery. The engine owns its KV cache, so only it can give the server
//    back the keys of the live entries: with SessionOptions::live_keys set, a
//    degraded session comes back online by itself; without it, it stays
//    local for the rest of its life. A health watch tells when the server
//    serves again: from the moment a session degrades, its steps send
//    grpc.health.v1 checks in the background (one at a time per Client, at
//    most every 100 ms, each given up after create_deadline; a check also
//    makes a channel in TRANSIENT_FAILURE reconnect, since gRPC reconnects
//    only when a call asks; ClientOptions sets the reconnect backoff). A
//    step never waits for a check. From recovery_interval after it degraded
//    (500 ms by default, +-recovery_jitter), once a check sent since then
//    has found the server SERVING (or without a health service, UNIMPLEMENTED)
//    and the channel is connected, the next step makes one attempt, bounded
//    by create_deadline as a whole (a session of a DecodeBatch: plus the
//    wait for the answers to the batch's messages in flight): the steps in
//    flight are decided locally,
//    a NEW server session is created with the same configuration (named by
//    the server: id() changes) and attached to a new stream (a session of a
//    DecodeBatch: to the batch's stream, a new one when the batch's last one
//    ended), and live_keys gives the keys of the live entries (when it
//    fails, that server session is closed in the background). As soon as
//    the attempt succeeds, the session is online (degraded() false,
//    degraded_reason() OK, id() the new one) and the old server session is
//    closed in the background. The step itself then goes to the server,
//    re-sending the live entries (in append order, pinned flags kept)
//    before its own appends, under its own number: the numbering goes on.
//    When the server accepts that step, counters().recoveries + 1 and the
//    wait goes back to recovery_interval. The new server session starts
//    with fresh ranking state: accumulated attention (h2o), affinity, the
//    entropy statistics and the decision cadence (decide_every) start over,
//    and its sinks and recent window are counted over the re-sent entries.
//    An attempt that fails (live_keys fails, the server errs or is silent
//    past the deadline) leaves the step to the local rule, which keeps the
//    budget, doubles the wait before the next one, up to
//    max_recovery_interval, and waits for a new serving check
//    (counters().recovery_attempts counts attempts). A re-sending step that
//    fails degrades the session again, with the same doubled wait and new
//    serving check: one that is late or whose stream breaks is decided
//    locally, as any such step; one the server rejects is returned as the
//    server's status, as any rejected step (its own entries forgotten, its
//    number taken by the next step), with degraded_reason() that status and
//    the new server session closed in the background. While the server is
//    down, stopped (SIGSTOP) or draining, no attempt is made, so no step
//    blocks and the wait does not grow.
//    The re-sending step must fit ClientOptions::max_message_bytes. An
//    attempt is made only when the step carries what the new session's first
//    step needs (queries and entropy when it decides).
//  - Close. Close() waits at most create_deadline for the server's answer,
//    then ends the session's own stream (a session of a DecodeBatch has
//    none): with StreamApi::kSync that can take up to about 100 ms more
//    (answers still unread are read and dropped); with kCallback it waits
//    until gRPC reports the cancelled call done, with no bound of its own.
//    With offline_when_unavailable (the default), a close the server does
//    not confirm in time, or a server-side failure, completes locally: OK,
//    counted in counters().unconfirmed_closes (the server reclaims the
//    session after its idle timeout); NOT_FOUND (the session was reclaimed
//    or lost with a server restart) is OK too. Without it, those are
//    returned as errors. An offline session's Close() sends nothing and
//    returns at once.
//
// Demote tier (SessionConfig::tier, docs/step-semantics.md section 12,
// docs/engines.md "A demote tier"). With tier.capacity > 0 the engine keeps
// a second, slower cache (host memory), and a step's outcome names three
// disjoint lists, each in append order: `evicted` (drop for good, from the
// device or the host tier), `demoted` (device to host) and `promoted` (host
// back to device). The engine applies them in that order -- evicted, then
// demoted, then promoted -- so that its device never holds more than the
// larger of its live entries after the previous step plus this step's
// appends and its live entries after this step, and its host tier at most
// D + P entries (docs/step-semantics.md section 12, step 7).
//  - Callbacks. SessionOptions::tier hands the moves to the engine inside
//    the call that returns the step's outcome (Step(), StepPipelined(),
//    Collect(), Flush(), DecodeBatch::Step()), on the caller's thread,
//    after the client's own record is updated: first tier.evict(evicted)
//    (when set), then tier.demote(demoted), then tier.promote(promoted);
//    each is called only with a non-empty list. The outcome still returns
//    all three lists: an engine that sets tier.evict frees the evicted
//    entries there and must not free them again from the outcome; one that
//    does not frees them after the call (its device then briefly holds the
//    promoted entries beside the evicted ones). An engine may also leave
//    the callbacks empty and apply the outcome's lists itself, in the same
//    order. A pipelined engine gets step t-1's moves during the call that
//    sends step t.
//  - Live entries. The client records demoted entries apart from live ones
//    (live_set.h): LiveSlots() and StepOutcome::live count live entries
//    only, TierSlots() lists the demoted ones. A promoted entry returns to
//    its original append position (and pinned flag), as on the server. An
//    appended slot id must be neither live nor demoted.
//  - Fail-open. The local `streaming` rule decides over live entries only,
//    and nothing scores the demoted entries once the server is gone. So the
//    first locally decided step (a missed deadline, a broken stream, an
//    offline session) hands every demoted entry back in its `evicted` list,
//    merged with the rule's own evictions in append order (and counted in
//    counters().evicted_by_fallback): the engine frees their host copies,
//    and the tier is empty from then on. Local steps
//    never demote or promote. A recovery re-sends the live entries only
//    (live_keys gets live slots), and the new server session starts with an
//    empty tier, demoting again as its decisions need. A session attached
//    (Client::Attach) with its live slots only does not know the server
//    session's demoted entries: one the server later promotes becomes the
//    newest live entry, and those still demoted at a fail-open are not in
//    its `evicted` list (the engine frees them itself).
//
// Errors: a step the server rejects (bad input: INVALID_ARGUMENT naming the
// field, RESOURCE_EXHAUSTED past a limit, ...) is returned as that status and
// leaves the session as it was (except a recovery's re-sending step, which
// degrades it again: see "Recovery"): the engine may resend a corrected
// step, which takes the same step number. Inputs the client can check
// (sizes, duplicate slot ids) are rejected before anything is sent.
//
// Thread-safety: a Session is used by one thread at a time (the engine's
// decode loop); live_keys and the tier callbacks are called on that
// thread, inside a step call.
// Distinct Sessions are independent and may be used from different threads,
// except the sessions of one DecodeBatch, which share its thread (batch.h).
// A Session does not need its Client to outlive it.

#ifndef ENTROKV_CLIENT_SESSION_H_
#define ENTROKV_CLIENT_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "entrokv/client/vectors.h"
#include "entrokv/core/config.h"
#include "entrokv/core/shadow.h"

namespace entrokv {

// How a Session drives its Decode stream. kSync: gRPC's blocking stream on
// the caller's thread, a watchdog thread cancelling it at a missed deadline
// (the lowest latency: no thread hand-off per step). kCallback: gRPC's
// callback API, the caller waiting on a condition variable. A missed deadline
// degrades the session either way, so both behave alike to the engine.
enum class StreamApi : uint8_t { kSync, kCallback };

// The step deadline a SessionOptions starts with: the environment variable
// ENTROKV_STEP_DEADLINE_MS (a number of milliseconds from 0.001 to 1e12,
// fractions allowed) when it is set and not empty, else 100 ms. Any other
// value counts as unset here, and makes Client::Connect() fail
// (InvalidArgument naming the variable).
absl::Duration DefaultStepDeadline();

struct SessionOptions {
  // Per-step deadline, counted from the step's send. Past it the step is
  // decided locally. absl::InfiniteDuration(): wait for the server forever.
  // Left as constructed ("unset"), it is DefaultStepDeadline(): the
  // deployment's ENTROKV_STEP_DEADLINE_MS, else 100 ms; an engine that
  // assigns it overrides the environment.
  absl::Duration step_deadline = DefaultStepDeadline();
  // The creation deadline: the most CreateSession (its RPC and the stream's
  // attach handshake together), Attach and Close() wait for the server.
  // absl::InfiniteDuration(): wait for the server forever.
  absl::Duration create_deadline = absl::Milliseconds(200);
  // Step number of the first step of a new session.
  uint64_t first_step = 0;
  // Fail open. When CreateSession fails for a reason that is not the
  // caller's (see "Failure" above), return an offline Session that decides
  // every step locally, its degraded_reason() saying why; and let Close()
  // complete locally when the server does not confirm it. False: return
  // those failures as errors.
  bool offline_when_unavailable = true;
  // When a step carries logits, compute their entropy on the engine side and
  // send only the entropy (true), or send the logits (false).
  bool entropy_on_client = true;
  StreamApi stream_api = StreamApi::kSync;
  // Shadow policies the server runs beside this session's own, to measure
  // what each would keep (docs/choosing-a-policy.md); empty: none. Each
  // policy's shape, decide_every, hard_ceiling, scored_layers and
  // projection_seed are the session's, whatever it says there. A session
  // recovered after an outage asks for them again (and starts its measures
  // afresh). Client::GetSession() reports them (SessionInfo::shadows).
  ShadowRequest shadowing;
  // Recovery of a degraded session (see "Recovery" above). The engine owns
  // its KV cache: given the live slots, in append order, this callback fills
  // `keys` with their keys, [entry][layer][kv_head][head_dim], exactly as
  // StepRequest::keys takes them (the sent layers, the model's full
  // head_dim), as floats. A non-OK status aborts that recovery attempt.
  // Called on the session's thread, during a step. Empty: a degraded session
  // stays local for the rest of its life.
  using LiveKeysCallback = std::function<absl::Status(
      absl::Span<const uint64_t> live_slots, std::vector<float>* keys)>;
  LiveKeysCallback live_keys;
  // The first recovery attempt comes recovery_interval after the session
  // degraded; after each failed attempt the wait doubles, up to
  // max_recovery_interval; each wait varies by +-recovery_jitter (a
  // fraction) so that the sessions of one engine do not retry in step.
  absl::Duration recovery_interval = absl::Milliseconds(500);
  absl::Duration max_recovery_interval = absl::Seconds(5);
  double recovery_jitter = 0.2;
  // Sketched sessions (config.shape.sketch_dim = r > 0): the engine's own
  // projections, one head_dim x r row-major matrix per (sent layer, kv head),
  // layer-major (e.g. PCA of its keys). Empty: the default seeded projection
  // (entrokv/core/sketch.h). They stay in the client: the server never needs
  // them, and an engine that attaches later must pass the same ones.
  std::vector<float> projection;
  // A demote tier's moves (see "Demote tier" above), for a session whose
  // config has tier.capacity > 0; ignored otherwise. Each callback is
  // optional and gets the slot ids of one step in append order, called in
  // the order evict, demote, promote, only with a non-empty list. The spans
  // are valid during the call only.
  // The callbacks must not throw: the library is built without exception
  // safety, and a throw would leave the session (or a DecodeBatch's other
  // sessions) with a step in flight.
  struct TierCallbacks {
    using Moves = std::function<void(absl::Span<const uint64_t> slot_ids)>;
    // Free these entries for good, from the device or the host tier (the
    // step's `evicted`). Empty: the engine frees StepOutcome::evicted
    // itself after the call.
    Moves evict;
    // Move these live entries from the device to the host tier.
    Moves demote;
    // Move these entries from the host tier back to the device.
    Moves promote;
  };
  TierCallbacks tier;
};

// One step's input. Spans are read during the call only.
struct StepRequest {
  // Entries appended since the previous step: the engine's slot ids, unique
  // among the session's live entries.
  absl::Span<const uint64_t> slot_ids;
  // Empty, or one flag per slot id: a pinned entry is never evicted.
  absl::Span<const uint8_t> pinned;
  // slot_ids.size() · layers · kv_heads · head_dim elements, laid out
  // [entry][layer][kv_head][head_dim]; any element type (converted). Always
  // the model's full head_dim: for a sketched session (shape.sketch_dim > 0)
  // the library projects them before sending.
  VectorView keys;
  // layers · q_heads · head_dim elements, [layer][q_head][head_dim], always
  // per q head and full head_dim: the library sums groups (group-sum query
  // form) and projects (sketches) itself. May be empty when
  // NextStepDecides() is false: such a step sends no queries and no entropy.
  VectorView queries;
  // The next-token entropy in nats, or the logits it is computed from. One
  // of them is required when PolicyNeedsEntropy(config) and the step decides.
  std::optional<double> entropy;
  absl::Span<const float> logits;
};

struct StepOutcome {
  uint64_t step = 0;
  // The slots to free now, in append order (oldest first); with a demote
  // tier, from the device or the tier (see "Demote tier" above).
  std::vector<uint64_t> evicted;
  // Demote tier only (empty without one, and on local steps): the entries
  // to move from the device to the tier, and back, in append order.
  std::vector<uint64_t> demoted;
  std::vector<uint64_t> promoted;
  int64_t live = 0;       // Live (device) entries after the step's moves.
  int64_t budget = 0;     // The step's effective budget.
  double entropy = 0.0;   // The entropy used (0 when none was needed).
  bool fallback = false;  // Decided locally, not by the server.
  // The server recorded the step's entries and made no decision
  // (decide_every > 1, not a decision step).
  bool deferred = false;
  absl::Duration latency;         // From send to result (client side).
  absl::Duration server_compute;  // Server time in core (0 for fallbacks).
};

struct SessionCounters {
  int64_t steps = 0;           // Steps answered, by the server or locally.
  int64_t server_steps = 0;    // Answered by the server.
  int64_t fallback_steps = 0;  // Decided locally; the sum of the three below.
  int64_t fallback_deadline = 0;     // ... because its deadline passed.
  int64_t fallback_unavailable = 0;  // ... because the stream broke / offline.
  int64_t fallback_degraded = 0;     // ... because an earlier step fell back.
  int64_t rejected_steps = 0;        // Steps the server or client rejected.
  int64_t evicted_by_server = 0;
  int64_t evicted_by_fallback = 0;
  int64_t bytes_sent = 0;      // Serialized request bytes.
  int64_t bytes_received = 0;  // Serialized response bytes.
  // Sessions created offline (1 or 0 for one Session).
  int64_t offline_sessions = 0;
  // Close() calls completed locally: the server did not confirm them in
  // time, and reclaims the session after its idle timeout.
  int64_t unconfirmed_closes = 0;
  // Recovery: attempts to re-create a degraded session on the server, and
  // those that brought it back online.
  int64_t recovery_attempts = 0;
  int64_t recoveries = 0;
};

class Session {
 public:
  class Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  // Ends the stream (steps in flight are abandoned); the server session stays
  // open and attachable until the server's idle timeout. Call Close() to free
  // it now.
  ~Session();

  // The server's session id; empty for an offline session. A recovery
  // replaces it with the new server session's.
  const std::string& id() const;
  // The effective configuration (defaults filled in by the server).
  const SessionConfig& config() const;
  // The number the next step will carry.
  uint64_t next_step() const;
  // True while steps are decided locally (from a fallback or an offline
  // creation until a recovery); degraded_reason() says why (OK when not
  // degraded).
  bool degraded() const;
  absl::Status degraded_reason() const;
  // Steps sent and not yet collected (0, 1 or 2).
  int in_flight() const;
  // True when the next step, appending `appended` entries, may be a decision
  // step (decide_every = 1, every decide_every-th step, or possibly past the
  // hard ceiling): it must then carry queries (and the entropy when the
  // policy reads it). False: the engine may leave them out, and the library
  // sends neither.
  bool NextStepDecides(int64_t appended) const;
  SessionCounters counters() const;
  // Live entries as this client knows them, in append order.
  std::vector<uint64_t> LiveSlots() const;
  // Demote tier: the demoted entries as this client knows them, in append
  // order (empty without a tier, and after a fail-open).
  std::vector<uint64_t> TierSlots() const;

  // Sends one step and waits for its evictions (or decides locally when the
  // deadline passes). Errors: InvalidArgument for input the client rejects,
  // the server's status for a step it rejects.
  // REQUIRES: in_flight() == 0; the session is not closed.
  absl::StatusOr<StepOutcome> Step(const StepRequest& request);

  // Sends step t and returns step t-1's outcome (nullopt when nothing was in
  // flight, i.e. on the first call). An error of step t-1 is returned as
  // such; step t is in flight either way unless the error is one the client
  // detected in `request` before sending it.
  // REQUIRES: in_flight() <= 1; the session is not closed.
  absl::StatusOr<std::optional<StepOutcome>> StepPipelined(
      const StepRequest& request);

  // The halves: StepAsync sends a step without waiting; Collect waits for the
  // oldest step in flight (its deadline counted from its send).
  // REQUIRES (StepAsync): in_flight() <= 1. (Collect): in_flight() >= 1.
  absl::Status StepAsync(const StepRequest& request);
  absl::StatusOr<StepOutcome> Collect();

  // Collects the step still in flight at the end of a pipelined run (nullopt
  // when none is).
  // REQUIRES: in_flight() <= 1.
  absl::StatusOr<std::optional<StepOutcome>> Flush();

  // Closes the server session (its state is freed), waiting at most
  // SessionOptions::create_deadline for the server, and ends the stream
  // (with kSync up to about 100 ms more; see "Close" above). With
  // offline_when_unavailable (the default) it fails only on the caller's
  // errors: a close the server does not confirm completes locally, and
  // NOT_FOUND is OK (see "Close" above). Later steps fail with
  // FailedPrecondition. Idempotent.
  absl::Status Close();

  // The library's state behind this Session (internal).
  Impl* impl() { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace entrokv

#endif  // ENTROKV_CLIENT_SESSION_H_
