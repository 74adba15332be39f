// Conversions between core's SessionConfig / SessionStats and the wire's
// entrokv.v1 messages, and between grpc::Status and absl::Status. Internal to
// the client library. Pure functions, thread-safe.

#ifndef ENTROKV_CLIENT_SRC_CONVERT_H_
#define ENTROKV_CLIENT_SRC_CONVERT_H_

#include "absl/status/status.h"
#include "entrokv/client/client.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "entrokv/v1/entrokv.pb.h"
#include "grpcpp/support/status.h"

namespace entrokv::client_internal {

// Every field is written explicitly (no UNSPECIFIED), so the server applies
// exactly this configuration.
void ConfigToProto(const SessionConfig& config, v1::SessionConfig* proto);
// Fields absent on the wire keep core's defaults.
SessionConfig ConfigFromProto(const v1::SessionConfig& proto);
SessionStats StatsFromProto(const v1::SessionStats& proto);
SessionInfo InfoFromProto(const v1::SessionInfo& proto);

absl::Status FromGrpc(const grpc::Status& status);
absl::Status FromProto(const v1::Status& status);

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_CONVERT_H_
