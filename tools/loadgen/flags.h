// The load generator's command line: its flags (defined in flags.cc), their
// --help topics, and the Options a run is made of, checked and normalised
// once so that no other file reads a flag.
//
// Thread-safety: call both functions once, from main(), before any other
// thread exists.

#ifndef ENTROKV_TOOLS_LOADGEN_FLAGS_H_
#define ENTROKV_TOOLS_LOADGEN_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "entrokv/core/config.h"

namespace entrokv::loadgen {

struct Options {
  std::vector<std::string> modes;  // "entrokv", "echo", in the order run.
  std::string client;  // "library" (default), "library-callback" or "sync".
  SessionConfig config;
  // The channel of every mode: target, TLS files, bearer token, message
  // size.
  ClientOptions client_options;
  // Sessions of the client library (--client=library*): deadlines, stream
  // API, and no offline sessions.
  SessionOptions session_options;
  int sessions = 0;
  int batch = 1;            // Sessions per thread.
  // With batch > 1: "batch" (DecodeBatch::Step), "session" (each
  // session's StepAsync and Collect, gathered by the library) or
  // "pipelined" (as "session", with the next message sent before the
  // previous one's answers are collected).
  std::string batch_calls = "batch";
  int threads = 0;          // sessions / batch.
  int rounds = 0;           // Ignored with a duration.
  absl::Duration duration;  // Zero: `rounds` rounds.
  int steps_per_round = 0;
  double rate = 0.0;  // Steps/s over all sessions; 0: closed loop.
  int prefill = 0;
  int prefill_chunk = 0;
  int pool = 0;
  uint64_t seed = 0;
  // --client=sync and Echo: a blocking round trip's (or close's) bound.
  absl::Duration sync_timeout;
  bool json = false;
  bool progress = false;
  bool fail_on_error = false;
  // The server's pid for its process counters: 0 finds it from a unix:
  // target, -1 reads none.
  int server_pid = 0;

  bool UsesLibrary() const { return client != "sync"; }
  // Open loop: the messages/s of one thread. Each message carries one step
  // of each of the thread's `batch` sessions, so that the threads together
  // send `rate` steps/s.
  double MessageRate() const { return rate / sessions; }
};

// Parses argv (entrokv::ParseFlags: --help by topic, ENTROKV_ environment
// variables; exits 0 after --help, 2 on an unknown flag or bad value).
void ParseCommandLine(int argc, char** argv);

// The flags as Options. Errors: InvalidArgument, whose message is the line
// to print before exiting 2 (a bad or contradictory flag, an unreadable
// --auth_token_file).
absl::StatusOr<Options> OptionsFromFlags();

}  // namespace entrokv::loadgen

#endif  // ENTROKV_TOOLS_LOADGEN_FLAGS_H_
