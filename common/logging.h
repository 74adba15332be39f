// --log_level, shared by every entrokv binary, and the routing of gRPC's own
// log lines through spdlog.
//
// InitLogging() reads --log_level (also ENTROKV_LOG_LEVEL: trace, debug,
// info, warn, error, critical or off), sets spdlog's level, and sends gRPC's
// log lines (gpr_log) to spdlog, so that they share its format and level.
// gRPC's errors are mostly about peers (a refused connection, a failed TLS
// handshake) and become warnings; its info and debug lines become debug.
//
// Thread-safety: call once, from main, after ParseFlags() and before any
// other thread exists.

#ifndef ENTROKV_COMMON_LOGGING_H_
#define ENTROKV_COMMON_LOGGING_H_

#include "absl/status/status.h"

namespace entrokv {

// Where a binary's log lines go: a tool whose report is its standard
// output (the load generator, the evaluation) logs to standard error.
enum class LogStream { kStdout, kStderr };

// Applies --log_level, and sends the log lines to `to`. Errors:
// InvalidArgument naming the flag and the levels it takes (the caller exits
// 2).
absl::Status InitLogging(LogStream to = LogStream::kStdout);

}  // namespace entrokv

#endif  // ENTROKV_COMMON_LOGGING_H_
