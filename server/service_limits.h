// The limits EntroKvService (server/service.h) and its stream handlers
// enforce or report.

#ifndef ENTROKV_SERVER_SERVICE_LIMITS_H_
#define ENTROKV_SERVER_SERVICE_LIMITS_H_

#include <cstdint>

namespace entrokv::server {

// Limits the service reports (ListSessions) or enforces itself. Each is
// named in the status of a call it refuses by the server flag that sets it.
struct ServiceLimits {
  int64_t max_message_bytes = 0;  // Bounds Echo's replies; 0: unbounded.
  int64_t max_bytes = 0;          // CPU bytes (enforced by the backend).
  int64_t max_gpu_bytes = 0;      // GPU bytes (enforced by the backend).
  // Decode and Echo streams open at once; past it a new stream ends
  // RESOURCE_EXHAUSTED at once. 0: unlimited.
  int64_t max_streams = 0;
  // Entries of each of a DecodeRequest's attach, steps and detach lists;
  // past it the stream ends RESOURCE_EXHAUSTED. REQUIRES: > 0.
  int64_t max_steps_per_message = 1024;
  // Steps of one session in one DecodeRequest; past it each of that
  // session's steps in the message is answered RESOURCE_EXHAUSTED and none
  // runs. REQUIRES: > 0.
  int64_t max_steps_per_session_per_message = 16;
  // Threads a DecodeRequest's steps run on, in parallel over its sessions
  // (StepPool, shared by every stream). REQUIRES: >= 1.
  int step_workers = 1;
  bool enable_echo = false;    // Off: Echo ends UNIMPLEMENTED at once.
  int64_t max_echo_bytes = 0;  // Largest Echo reply payload; 0: unbounded.
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_SERVICE_LIMITS_H_
