// SessionRunner: the thread of one session (--batch=1), whichever client
// sends its decode steps. It opens and prefills the session and, in each
// phase, sends --steps_per_round steps of the phase's mode: entrokv decode
// steps through its subclass, or Echo messages of the same bytes over its
// own raw stream. A subclass per client (library_driver.cc,
// sync_driver.cc) opens and closes the server session and sends one decode
// step.
//
// Thread-safety: used by its own thread, as every Runner.

#ifndef ENTROKV_TOOLS_LOADGEN_SESSION_RUNNER_H_
#define ENTROKV_TOOLS_LOADGEN_SESSION_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "report.h"
#include "runner.h"
#include "sync_stream.h"
#include "workload.h"

namespace entrokv::loadgen {

// What became of one decode step.
struct StepAnswer {
  // OK, the server's rejection, or the status of the stream that ended.
  absl::Status status;
  // The client library decided the step locally instead of the server
  // (status is then OK), for the session's `degraded_reason`.
  bool fallback = false;
  absl::Status degraded_reason;
};

// The status code name a fallback step is counted under: that of the
// session's degraded reason (never "OK", which would read as a server
// answer).
std::string FallbackCause(const absl::Status& degraded_reason);

// A session whose prefill was decided locally is degraded for good (every
// step of it would be a fallback): its start counts as failed, with this.
absl::Status PrefillFellBack(const absl::Status& degraded_reason);

class SessionRunner : public Runner {
 public:
  SessionRunner(Shared* shared, SessionData data);

  // Open(), the prefill in chunks, and the Echo stream.
  absl::Status SetUp() final;
  void RunPhase(const std::string& mode, absl::Time phase_start) final;

 protected:
  // Creates and attaches the server session; returns its id.
  virtual absl::StatusOr<std::string> Open() = 0;
  // Sends one step of `count` new entries at slots first_slot, ...;
  // `stats` null: not measured.
  virtual StepAnswer SendDecode(uint64_t first_slot, int count,
                                const std::string& keys,
                                const std::string& query, double entropy,
                                ModeStats* stats) = 0;
  // The status that ended the decode stream for good, after which its
  // steps are not sent; null while it serves, and for the client library,
  // which decides such steps locally.
  virtual const absl::Status* DecodeEnded() const { return nullptr; }
  // The number of the next decode step where the runner numbers the steps
  // itself (--client=sync); 0 where the library does. It sizes Echo.
  virtual uint64_t next_step() const { return 0; }

  Shared* shared() const { return shared_; }
  ElementType element_type() const {
    return shared_->options.config.shape.element_type;
  }
  // Null without an Echo mode (or before SetUp()).
  EchoSender* echo() const { return echo_.get(); }

 private:
  // One Echo message as large as a decode step, with a reply as large as a
  // typical step result.
  absl::Status SendEcho(ModeStats* stats);
  int64_t RequestSizeHint();

  Shared* const shared_;
  const SessionData data_;
  std::string session_id_;
  uint64_t next_slot_ = 0;
  size_t pool_index_ = 0;
  int64_t request_size_ = 0;
  std::unique_ptr<EchoSender> echo_;
};

}  // namespace entrokv::loadgen

#endif  // ENTROKV_TOOLS_LOADGEN_SESSION_RUNNER_H_
