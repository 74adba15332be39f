// The Echo stream's handler: the load test's baseline, answering each
// message with one message of the requested size (--enable_echo,
// --max_echo_bytes).

#ifndef ENTROKV_SERVER_ECHO_STREAM_H_
#define ENTROKV_SERVER_ECHO_STREAM_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "server/metrics.h"
#include "server/service_limits.h"
#include "server/stream_handler.h"

namespace entrokv::server {

// REQUIRES: `open_streams` was incremented for this stream (the handler
// decrements it when destroyed); `limits` and `metrics` outlive it.
std::unique_ptr<StreamHandler> NewEchoStream(
    const ServiceLimits& limits, ServerMetrics* metrics,
    std::atomic<int64_t>* open_streams);

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_ECHO_STREAM_H_
