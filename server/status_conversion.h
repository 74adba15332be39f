// The one place where absl::Status becomes a gRPC status.
//
// Core and the server's own checks report errors as absl::Status; everything
// that leaves the server (an RPC's status, or a failed step's status inside a
// DecodeResponse) goes through ToGrpcStatus(), so the code mapping and message
// handling live here only. Pure functions, thread-safe.

#ifndef ENTROKV_SERVER_STATUS_CONVERSION_H_
#define ENTROKV_SERVER_STATUS_CONVERSION_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "entrokv/v1/entrokv.pb.h"
#include "grpcpp/support/status.h"

namespace entrokv::server {

// Same code (absl and gRPC share the canonical code numbers), same message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Fills a wire Status (for a step or attach result) from ToGrpcStatus(status).
void ToProtoStatus(const absl::Status& status, v1::Status* out);

// A copy of `status` whose message is prefixed by `field_prefix`, e.g.
// "steps[3]." + "append.keys: ..." (no separator is added).
absl::Status PrefixMessage(absl::string_view field_prefix,
                           const absl::Status& status);

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_STATUS_CONVERSION_H_
