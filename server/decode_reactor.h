// The Decode stream's reactor (docs/design.md "How a step travels"): one per
// stream, driving the sessions it attaches through the registry. Created by
// EntroKvService::Decode; it deletes itself when the stream ends.

#ifndef ENTROKV_SERVER_DECODE_REACTOR_H_
#define ENTROKV_SERVER_DECODE_REACTOR_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "grpcpp/grpcpp.h"
#include "server/metrics.h"
#include "server/service.h"
#include "server/session_registry.h"
#include "server/step_pool.h"

namespace entrokv::server {

// A reactor for one Decode stream. REQUIRES: `open_streams` was incremented
// for this stream (the reactor decrements it when the stream ends);
// `registry`, `limits`, `metrics` and `pool` (on which a message's steps run,
// in parallel over its sessions) outlive every stream.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewDecodeReactor(
    SessionRegistry* registry, const ServiceLimits& limits,
    ServerMetrics* metrics, std::atomic<int64_t>* open_streams,
    StepPool* pool, std::string peer);

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_DECODE_REACTOR_H_
