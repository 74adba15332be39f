// One load-generator run: connect (the library's channel for the stub, and
// its Client for --client=library*), drop the Echo baseline when the server
// does not serve it, make a runner per thread, run the phases (phases.h)
// and print the report (report.h).
//
// A server that drains, dies or is not there does not end the run: every
// step the server did not answer OK is counted by status code, the report
// is printed, and the exit code is 0 unless --fail_on_error is given.
//
// Thread-safety: call from main(), once.

#ifndef ENTROKV_TOOLS_LOADGEN_RUN_H_
#define ENTROKV_TOOLS_LOADGEN_RUN_H_

#include "flags.h"

namespace entrokv::loadgen {

// Returns the exit code: 0 when the run completed, 1 on failures with
// --fail_on_error or when no mode is left to run, 2 on bad TLS or target
// options (which the channel checks).
int Run(const Options& options);

}  // namespace entrokv::loadgen

#endif  // ENTROKV_TOOLS_LOADGEN_RUN_H_
