// The Echo stream's reactor: the load test's baseline, answering each
// message with one message of the requested size (--enable_echo,
// --max_echo_bytes). It deletes itself when the stream ends.

#ifndef ENTROKV_SERVER_ECHO_REACTOR_H_
#define ENTROKV_SERVER_ECHO_REACTOR_H_

#include <atomic>
#include <cstdint>

#include "grpcpp/grpcpp.h"
#include "server/metrics.h"
#include "server/service.h"

namespace entrokv::server {

// REQUIRES: `open_streams` was incremented for this stream (the reactor
// decrements it when the stream ends); `limits` and `metrics` outlive it.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewEchoReactor(
    const ServiceLimits& limits, ServerMetrics* metrics,
    std::atomic<int64_t>* open_streams);

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_ECHO_REACTOR_H_
