// Runner: one thread's share of a run, a session or a batch of sessions
// stepped together; and Shared, what the threads of a run share: the
// options, the connection, the progress count and the measurements.
//
// A run sets every runner up, then runs its phases in lock step (phases.h):
// each phase, every runner sends --steps_per_round steps (per session) of
// one mode, entrokv Decode steps or Echo messages of the same bytes.
//
// Thread-safety: Shared's stats and failures are guarded by its mutex and
// `done` is atomic; the rest is set before the threads start and only read
// after. A Runner is used by its own thread.

#ifndef ENTROKV_TOOLS_LOADGEN_RUNNER_H_
#define ENTROKV_TOOLS_LOADGEN_RUNNER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "entrokv/client/client.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "flags.h"
#include "report.h"
#include "workload.h"

namespace entrokv::loadgen {

inline std::string CodeName(absl::StatusCode code) {
  return absl::StatusCodeToString(code);
}

struct Shared {
  explicit Shared(const Options& run_options) : options(run_options) {}

  const Options& options;
  // options.modes, less echo when the server does not serve it.
  std::vector<std::string> modes;
  // Echo in every mode; Decode too with --client=sync.
  std::shared_ptr<v1::EntroKv::Stub> stub;
  std::unique_ptr<Client> client;  // --client=library*
  int64_t echo_reply_bytes = 0;
  // The server's pid, when its process counters can be read from here
  // (server_process.h); the phases' ends sample them.
  std::optional<int> server_pid;
  // Steps done or not sent, for the progress bar.
  std::atomic<int64_t> done{0};
  absl::Mutex mu;
  std::map<std::string, ModeStats> stats ABSL_GUARDED_BY(mu);
  RunFailures failures ABSL_GUARDED_BY(mu);
  // With --shadows: each session's shadow measures, read before it closed.
  std::vector<ShadowStats> shadows ABSL_GUARDED_BY(mu);

  bool RunsEcho() const {
    return std::find(modes.begin(), modes.end(), "echo") != modes.end();
  }
  void Merge(const std::string& mode, const ModeStats& mode_stats) {
    absl::MutexLock lock(&mu);
    stats[mode].Merge(mode_stats);
  }
  void CloseFailed(const absl::Status& status) {
    absl::MutexLock lock(&mu);
    ++failures.closes_failed[CodeName(status.code())];
  }
  // With --shadows, reads `session`'s shadow measures into `shadows` once
  // the server has run its shadows on every step it answered (they run
  // after each reply; this waits up to 5 s for the last). An offline or
  // unreadable session adds nothing.
  void CollectShadows(const Session& session);
};

class Runner {
 public:
  virtual ~Runner() = default;
  // Creates, attaches and prefills the runner's sessions and opens its
  // Echo stream when the run has one.
  virtual absl::Status SetUp() = 0;
  // Sends one phase's steps of `mode` and merges their stats into Shared.
  virtual void RunPhase(const std::string& mode, absl::Time phase_start) = 0;
  // Closes whatever SetUp() opened. Safe after a failed SetUp() and after
  // any failure of the server.
  virtual void TearDown() = 0;
};

// The runner of one session through the client library
// (library_driver.cc).
std::unique_ptr<Runner> CreateLibraryRunner(Shared* shared, SessionData data);
// The runner of `data.size()` sessions in one DecodeBatch, one message per
// decode step for all of them (library_driver.cc).
std::unique_ptr<Runner> CreateBatchRunner(Shared* shared,
                                          std::vector<SessionData> data);
// The runner of one session over the raw transport, --client=sync
// (sync_driver.cc).
std::unique_ptr<Runner> CreateSyncRunner(Shared* shared, SessionData data);

}  // namespace entrokv::loadgen

#endif  // ENTROKV_TOOLS_LOADGEN_RUNNER_H_
