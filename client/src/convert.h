// Conversions the client library alone needs: the server's SessionInfo into
// core's structs, and grpc::Status / v1::Status into absl::Status. The config
// and stats fields themselves are read by entrokv::proto (the same code the
// server uses). Internal to the client library. Pure functions, thread-safe.

#ifndef ENTROKV_CLIENT_SRC_CONVERT_H_
#define ENTROKV_CLIENT_SRC_CONVERT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "entrokv/client/client.h"
#include "entrokv/core/config.h"
#include "entrokv/v1/entrokv.pb.h"
#include "grpcpp/support/status.h"

namespace entrokv::client_internal {

// The server's effective configuration: fields absent on the wire keep core's
// defaults. A value this build cannot read (an enum value added by a newer
// server, a conflicting policy name) is InternalError naming the field.
absl::StatusOr<SessionConfig> EffectiveConfigFromProto(
    const v1::SessionConfig& proto);
// Reads config and stats as EffectiveConfigFromProto does, with the same
// errors.
absl::StatusOr<SessionInfo> InfoFromProto(const v1::SessionInfo& proto);

absl::Status FromGrpc(const grpc::Status& status);
absl::Status FromProto(const v1::Status& status);

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_CONVERT_H_
