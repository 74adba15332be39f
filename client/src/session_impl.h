// Session::Impl: the state behind entrokv::Session (see session.h for the
// contract). Internal to the client library; built by client.cc. Its methods
// are defined in session.cc, and those of recovery in session_recovery.cc.
//
// Thread-safety: as Session: one caller thread at a time.

#ifndef ENTROKV_CLIENT_SRC_SESSION_IMPL_H_
#define ENTROKV_CLIENT_SRC_SESSION_IMPL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "decode_stream.h"
#include "entrokv/client/live_set.h"
#include "entrokv/client/session.h"
#include "entrokv/core/config.h"
#include "entrokv/core/sketch.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "session_setup.h"

namespace entrokv {
namespace client_internal {

// One DecodeRequest of a DecodeBatch: the steps its sessions gathered, sent
// as one message and answered by one response (batch.h).
struct BatchMessage {
  bool sent = false;
  int steps = 0;                          // Steps in it, once sent.
  absl::Time until = absl::InfinitePast();  // Its deadline, once sent.
  // Set once its answer was read (OK), or once it failed: the stream
  // ended, the deadline passed, or the batch went first.
  std::optional<absl::Status> outcome;
  // Its answer, when `outcome` is OK. The batch recycles a message that no
  // session holds any more, and the next answer is parsed into the memory
  // of this one (fields other than this are reset).
  v1::DecodeResponse response;
};

// What a session of a DecodeBatch needs of its batch (client.cc's
// DecodeBatchImpl). The batch's stream serves all its sessions; when a step
// message of the batch fails, the batch ends that stream and counts a new
// generation: a session attached under an older generation is attached no
// more (its server session was detached when the stream ended).
class BatchLink {
 public:
  virtual ~BatchLink() = default;
  // The batch's stream, a new one opened first when the last one ended;
  // the answers to the messages in flight on it are read first, so that an
  // attach sent on it next reads its own answer.
  virtual DecodeStream* LiveStream() = 0;
  virtual int64_t generation() const = 0;
  // Ends the stream (a message or an attach on it failed): the next
  // LiveStream() opens a new one. The messages in flight and the one being
  // gathered fail (UNAVAILABLE).
  virtual void EndStream() = 0;

  // Gathering (batch.h, "Steps of the per-session calls"). True when the
  // message being gathered holds a step of `session` already.
  virtual bool Holds(const Session::Impl* session) const = 0;
  // A new step of the message being gathered (opened when none is), to be
  // filled; its message and its position there.
  virtual v1::SessionStep* AddStep(std::shared_ptr<BatchMessage>* message,
                                   int* index) = 0;
  // Takes back the step AddStep() added last (its session rejected it).
  virtual void DropLastStep() = 0;
  // `session` has gathered its step (sent or decided locally); `deadline`
  // its step deadline when sent. Sends the message once every open session
  // of the batch has gathered one (checked again when a session is closed
  // or destroyed).
  virtual void Gathered(const Session::Impl* session, bool sent,
                        absl::Duration deadline) = 0;
  // Sends the message being gathered, if any.
  virtual void SendGathered() = 0;
  // Sends `message` if it is still being gathered, then reads the answers
  // in order until its own (or the stream's failure) is in.
  virtual void Await(BatchMessage* message) = 0;
  // `session` is closed: it no longer counts in Gathered().
  virtual void Closed(const Session::Impl* session) = 0;
  // `session` is destroyed.
  virtual void Leave(Session::Impl* session) = 0;
};

}  // namespace client_internal

class Session::Impl {
 public:
  // An online session: `stream` is attached to `id` already. `requested` is
  // the configuration the engine asked for, `effective` the server's.
  Impl(client_internal::ClientShared shared, std::string id,
       const SessionConfig& requested, const SessionConfig& effective,
       const SessionOptions& options, uint64_t first_step,
       std::unique_ptr<client_internal::DecodeStream> stream);
  // An offline session: every step is decided locally; `why` says why.
  // Counts itself in counters().offline_sessions.
  Impl(client_internal::ClientShared shared, const SessionConfig& requested,
       const SessionOptions& options, absl::Status why);
  // Leaves its DecodeBatch, if any.
  ~Impl();

  // Seeds the live set (Attach).
  void SeedLive(absl::Span<const uint64_t> slots) { live_.Append(slots, {}); }
  // Steps the server accepted before this Session (Attach), for the cadence.
  void SetStepsDone(int64_t steps) { steps_done_ = steps; }
  bool NextStepDecides(int64_t appended) const;

  const std::string& id() const { return id_; }
  const SessionConfig& config() const { return config_; }
  uint64_t next_step() const { return next_step_; }
  bool degraded() const { return degraded_; }
  const absl::Status& degraded_reason() const { return degraded_reason_; }
  int in_flight() const { return static_cast<int>(in_flight_.size()); }
  const SessionCounters& counters() const { return counters_; }
  std::vector<uint64_t> LiveSlots() const { return live_.Slots(); }
  std::vector<uint64_t> TierSlots() const { return live_.TierSlots(); }

  // Each adds its counter changes to the Client's totals.
  absl::Status StepAsync(const StepRequest& request);
  absl::StatusOr<StepOutcome> Collect();
  absl::Status Close();

  // Sessions of a DecodeBatch (batch.h) share its stream: their steps are
  // gathered into the batch's messages, by DecodeBatch::Step() or by the
  // per-session calls above.
  // The session is attached to `batch`'s stream now.
  void SetBatch(client_internal::BatchLink* batch) {
    batch_ = batch;
    batch_generation_ = batch->generation();
  }
  const client_internal::BatchLink* batch() const { return batch_; }
  // The batch is destroyed: later steps fail with FailedPrecondition; steps
  // in flight whose answers were not read yet are decided locally.
  void BatchGone() {
    batch_ = nullptr;
    batch_gone_ = true;
  }
  // DecodeBatch::Step()'s half: validates and gathers a step into the
  // batch's message being gathered (REQUIRES: no step in flight).
  absl::Status StepBatched(const StepRequest& request);
  absl::Duration step_deadline() const { return options_.step_deadline; }

 private:
  absl::Status StepAsyncImpl(const StepRequest& request);
  absl::StatusOr<StepOutcome> CollectImpl();

  enum class Cause { kDeadline, kUnavailable, kDegraded };
  struct Pending {
    uint64_t step;
    // The step's own appends: one for a decode step, held inline.
    absl::InlinedVector<uint64_t, 1> slot_ids;
    absl::Time sent;
    double entropy;
    bool local;   // Not sent: decided locally when collected.
    bool resync;  // Also re-sent the live entries after a recovery.
    // Decided locally already (a recovery settles the steps in flight).
    std::optional<StepOutcome> decided;
    // A session of a DecodeBatch: the message that carries the step, and
    // the step's position in it (null when not sent).
    std::shared_ptr<client_internal::BatchMessage> message;
    int index = -1;
  };
  // The live entries a recovery re-sends, in append order, before the next
  // step's own appends.
  struct Resync {
    std::vector<uint64_t> slot_ids;
    std::vector<uint8_t> pinned;
    std::string keys;  // Wire form: the session's element type, sketched.
  };

  // Validates `request`, writes its wire form into `out` (unless null: the
  // step is decided locally) and records it in flight.
  absl::Status Prepare(const StepRequest& request, v1::SessionStep* out);
  // The batch halves of StepAsyncImpl and CollectImpl.
  absl::Status GatherStep(const StepRequest& request);
  absl::StatusOr<StepOutcome> CollectGathered(const Pending& pending);
  absl::StatusOr<StepOutcome> Finish(const Pending& pending,
                                     const v1::SessionStepResult& result);
  absl::Status Validate(const StepRequest& request, double* entropy,
                        bool* has_entropy) const;
  void Degrade(absl::Status why);
  // Hands a step's moves to SessionOptions::tier's callbacks (session.h,
  // "Demote tier"), as the outcome is returned to the engine.
  void DeliverMoves(const StepOutcome& outcome) const;
  StepOutcome Fallback(const Pending& pending, Cause cause);
  // A step whose answer failed (`why`: the stream's end, a missed
  // deadline): degrades the session and decides the step locally.
  StepOutcome FailedAnswer(const Pending& pending, const absl::Status& why);

  // Recovery (session.h): before a step of a degraded session, when its
  // time has come, the channel is connected and `request` suits the new
  // server session's cadence, tries Recover() within the creation deadline.
  void MaybeRecover(const StepRequest& request);
  bool RecoveryAccepts(const StepRequest& request) const;
  // Settles the steps in flight locally, creates and attaches a new server
  // session, reads the live entries' keys from the engine and makes the
  // session online again, the entries to re-send in resync_. On failure
  // nothing is changed but the steps settled (a server session created is
  // closed in the background).
  absl::Status Recover(absl::Time deadline);
  // Fills resync->keys (wire form) for resync->slot_ids from live_keys.
  absl::Status ResyncKeys(Resync* resync);
  // Schedules the next attempt after a failed one: the wait doubles, up to
  // options_.max_recovery_interval.
  void RecoveryFailed();
  // Notes when the session degraded (or an attempt failed): only a health
  // check sent since counts; sends one when the session may recover.
  void WatchHealth();
  absl::Duration Jittered(absl::Duration wait);

  // How a step decided locally without a server answer is counted.
  Cause LocalCause() const {
    return offline_ ? Cause::kUnavailable : Cause::kDegraded;
  }

  client_internal::ClientShared shared_;
  std::string id_;  // Empty while offline.
  SessionConfig requested_;
  SessionConfig config_;
  SessionOptions options_;
  StreamingRule rule_;
  std::unique_ptr<client_internal::DecodeStream> stream_;

  uint64_t next_step_;
  uint64_t first_step_;  // Of the current server session (NextStepDecides).
  int64_t steps_done_ = 0;
  // Sums groups and projects (absent: the projection was invalid, and every
  // step fails with sketcher_status_).
  std::optional<Sketcher> sketcher_;
  absl::Status sketcher_status_;
  std::vector<float> scratch_in_, scratch_out_;
  LiveSet live_;
  // Oldest first; at most two (StepAsync refuses a third), held inline, so
  // that a step allocates no node for its record.
  absl::InlinedVector<Pending, 2> in_flight_;
  // The last answer read on the session's own stream; each read parses into
  // its memory.
  v1::DecodeResponse answer_;
  bool degraded_ = false;
  absl::Status degraded_reason_;
  // Created offline and never online since: local steps count as
  // fallback_unavailable rather than fallback_degraded.
  bool offline_ = false;
  // Recovery: the earliest time of the next attempt (while degraded) and of
  // the next poke of the channel, the wait after the next failure, jitter's
  // source, and what the next step re-sends after a successful attempt.
  absl::Time next_recovery_ = absl::InfiniteFuture();
  // When the session last degraded: only a health check sent since counts.
  absl::Time degraded_at_ = absl::InfinitePast();
  absl::Duration recovery_wait_;
  std::minstd_rand random_;
  std::optional<Resync> resync_;
  bool closed_ = false;
  // The DecodeBatch that steps this session, and its stream's generation
  // when this session was last attached to it.
  client_internal::BatchLink* batch_ = nullptr;
  int64_t batch_generation_ = 0;
  bool batch_gone_ = false;  // Its DecodeBatch was destroyed first.
  SessionCounters counters_;
};

}  // namespace entrokv

#endif  // ENTROKV_CLIENT_SRC_SESSION_IMPL_H_
