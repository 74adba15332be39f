// DecodeBatch: the steps of many sessions in one message, as an engine's
// decode batch produces them.
//
// An engine decodes many sequences per iteration. A DecodeBatch owns one
// Decode stream; the sessions created through it are attached to that
// stream, and DecodeBatch::Step() sends one step for each of them in a single
// DecodeRequest and waits for the single DecodeResponse that answers them
// all: one round trip per decode iteration, whatever the batch size.
//
// Per-session guarantees are those of session.h: each step is validated on
// its own (a bad step gets its own error and leaves its session unchanged,
// the others go on); a session that is degraded (offline at creation, or
// after a fallback) decides locally with the `streaming` rule and keeps its
// budget. The deadline of a batch step is the smallest step_deadline of the
// sessions in it, counted from the send; when it passes, or the stream
// breaks, every session in that message decides locally and is degraded, and
// the batch ends its stream (so that a late answer is never read as a later
// step's): the batch's other sessions are degraded at their next step. A
// degraded session with a SessionOptions::live_keys callback recovers as
// session.h says, through the batch: its new server session is attached to a
// new stream of the batch, and its live entries are re-sent with its next
// batched step. A recovery whose attach fails ends that stream too, and so
// degrades the batch's other sessions (they share the stream; each then
// recovers in turn).
//
// One message carries at most the server's --max_steps_per_message steps
// (1024 by default); past it the server ends the stream and every session of
// the batch falls back. Split larger decode batches over several
// DecodeBatches.
//
// Steps of the per-session calls. A session of a batch may also be stepped
// with its own Session calls (Step, StepPipelined, StepAsync and Collect,
// Flush), as an engine that keeps one Session per sequence does: nothing
// else changes in the engine. Such a step is gathered into the batch's next
// message rather than sent at once, and the message is sent when
//  - every open session of the batch has gathered a step since the last
//    message was sent (a decode iteration that steps every sequence sends
//    one message, at its last sequence's call; checked again when a session
//    is closed or destroyed);
//  - a call needs the answer to a gathered step (Collect, Flush, a blocking
//    Step, StepPipelined collecting the previous step);
//  - a session gathers its next step (one step per session per message);
//  - DecodeBatch::Step() is called (the gathered steps go first, in a
//    message of their own).
// An engine that calls StepPipelined (or StepAsync, and Collect later) for
// each of its sequences therefore sends one message per decode iteration,
// and its round trip overlaps the engine's compute as a pipelined single
// session's does. A blocking Step() sends at once what is gathered, its own
// step included: an engine stepping its sequences one blocking Step() after
// another sends one message per step, as separate sessions do. A session
// that stops stepping while still open holds each message back until a
// call needs it: Close() a session whose sequence has ended. A gathered
// step's deadline is its message's (the smallest step_deadline in it,
// counted from the message's send), and StepOutcome::latency counts from
// the call that gathered it. A missed deadline or a broken stream ends the
// stream as above: every session with a step in that message, in a later
// one already sent, or in the one being gathered decides it locally and
// degrades. A session created through the batch (or recovering) while
// messages are in flight first waits for their answers (each within its
// own deadline); its create_deadline counts from then.
//
// Session::Close(), counters(), LiveSlots() work as usual; Close() and the
// Session's destruction leave the batch's stream open. A step of that
// session already gathered stays in its message (which Close() sends when
// that completes it): answered as usual when it reaches the server before
// the close, NOT_FOUND after it. A Session may outlive its DecodeBatch, but cannot step then
// (FailedPrecondition); its steps in flight whose answers were not read yet
// are decided locally when collected.
//
// Thread-safety: a DecodeBatch and its sessions are used by one thread at a
// time (the engine's scheduler loop): every call on a session of the batch,
// Close() and its destruction included, counts as a use of the batch. It
// must not outlive the Client that created it.

#ifndef ENTROKV_CLIENT_BATCH_H_
#define ENTROKV_CLIENT_BATCH_H_

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "entrokv/client/session.h"
#include "entrokv/core/config.h"

namespace entrokv {

struct BatchStep {
  Session* session = nullptr;  // Created by this DecodeBatch.
  StepRequest request;
};

class DecodeBatch {
 public:
  virtual ~DecodeBatch() = default;

  // Creates a server session (as Client::CreateSession) attached to this
  // batch's stream. With options.offline_when_unavailable an unreachable
  // server yields an offline session. `options.stream_api` is ignored (the
  // batch's stream serves every session).
  virtual absl::StatusOr<std::unique_ptr<Session>> CreateSession(
      const SessionConfig& config, const SessionOptions& options = {},
      std::string_view session_id = {}) = 0;

  // Sends one step for each entry of `steps` (each session at most once) in
  // one message and returns, in the same order, each step's outcome or its
  // error. A session's error does not affect the others. A session with a
  // step of its own calls in flight gets FailedPrecondition; steps the
  // sessions' own calls gathered are sent first, in a message of their own.
  virtual std::vector<absl::StatusOr<StepOutcome>> Step(
      absl::Span<const BatchStep> steps) = 0;
};

}  // namespace entrokv

#endif  // ENTROKV_CLIENT_BATCH_H_
