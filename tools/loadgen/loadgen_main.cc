// entrokv-loadgen: N concurrent synthetic sessions against a running
// entrokv-server, side by side with the Echo baseline of the same bytes.
//
// Each session thread creates a server session, prefills it with --prefill
// entries (in chunks, not measured), then runs --rounds rounds (or, with
// --duration, whole rounds until that time has passed); in each round
// every mode (entrokv Decode steps, then Echo messages of the same sizes) runs
// --steps_per_round steps per session, all sessions in lock step between
// phases, so both modes see the same machine state. Latency is measured from
// a step's send (open loop: from its scheduled time, so queueing counts) to
// its answer.
//
// A server that drains, dies or is not there does not end the run: every
// step that the server did not answer OK is counted by status code (see
// report.h), the report is printed, and the exit code is 0 unless
// --fail_on_error is given. Bad flags exit 2.
//
// The parts: flags.h (the command line), workload.h (what the sessions
// send), runner.h (a thread's share of the run) with its drivers
// library_driver.cc and sync_driver.cc, sync_stream.h (the raw transport),
// phases.h (the lock step), run.h and report.h.

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "flags.h"
#include "run.h"

int main(int argc, char** argv) {
  entrokv::loadgen::ParseCommandLine(argc, argv);
  // As the server does (server/main.cc): Debian's Abseil keeps a lock graph
  // on every lock, which the load generator's own CPU figures would carry
  // (1.3% of its samples at one session).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // The report is standard output (--json: for machines); logs go aside.
  if (absl::Status status = entrokv::InitLogging(entrokv::LogStream::kStderr);
      !status.ok()) {
    std::fprintf(stderr, "entrokv-loadgen: %s\n",
                 std::string(status.message()).c_str());
    return 2;
  }
  absl::StatusOr<entrokv::loadgen::Options> options =
      entrokv::loadgen::OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  return entrokv::loadgen::Run(*options);
}
