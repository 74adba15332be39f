// The Decode stream's handler (docs/design.md "How a step travels"): one per
// stream, driving the sessions it attaches through the registry. Created by
// EntroKvService::OpenDecode; the transport (server/async_calls.h)
// destroys it when the stream ends.

#ifndef ENTROKV_SERVER_DECODE_STREAM_H_
#define ENTROKV_SERVER_DECODE_STREAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "server/metrics.h"
#include "server/service_limits.h"
#include "server/session_registry.h"
#include "server/step_pool.h"
#include "server/stream_handler.h"

namespace entrokv::server {

// A handler for one Decode stream. REQUIRES: `open_streams` was incremented
// for this stream (the handler decrements it when destroyed); `registry`,
// `limits`, `metrics` and `pool` (on which a message's steps run, in parallel
// over its sessions) outlive every stream.
std::unique_ptr<StreamHandler> NewDecodeStream(
    SessionRegistry* registry, const ServiceLimits& limits,
    ServerMetrics* metrics, std::atomic<int64_t>* open_streams,
    StepPool* pool, std::string peer);

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_DECODE_STREAM_H_
