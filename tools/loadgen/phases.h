// The lock step of a run. Each runner has its own thread; every thread runs
// phases that end at one barrier: first its runner's SetUp(), then rounds x
// modes phases (phase p runs mode p % modes), then its TearDown(). With
// --duration the rounds go on until that time has passed since the setup
// ended, checked when a round ends (the round in progress finishes). A
// runner whose SetUp() failed keeps the lock step: its steps are counted as
// not sent, under the status its start failed with. A progress bar on
// stderr (--progress) shows the share done and the phase running.
//
// Thread-safety: RunPhases() starts and joins every thread it uses.

#ifndef ENTROKV_TOOLS_LOADGEN_PHASES_H_
#define ENTROKV_TOOLS_LOADGEN_PHASES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runner.h"

namespace entrokv::loadgen {

struct PhaseLog {
  std::vector<absl::Status> setup_status;  // Per runner.
  absl::Time setup_end;                    // When every runner was set up.
  // Per phase completed, in order: its mode and its end.
  std::vector<std::string> modes;
  std::vector<absl::Time> ends;
  // Per phase completed: its start (after the previous phase's end and the
  // server's counters were read).
  std::vector<absl::Time> starts;
};

// Runs the phases of `runners` (one thread each) against `shared`, whose
// stats receive their steps, and returns what ran.
PhaseLog RunPhases(Shared* shared,
                   const std::vector<std::unique_ptr<Runner>>& runners);

}  // namespace entrokv::loadgen

#endif  // ENTROKV_TOOLS_LOADGEN_PHASES_H_
