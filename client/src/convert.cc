#include "convert.h"

#include "absl/strings/str_cat.h"
#include "proto/convert/config_convert.h"
#include "proto/convert/shadow_convert.h"

namespace entrokv::client_internal {
namespace {

// What the server sent is not the caller's input: an unreadable field is the
// server's (or a version skew's) fault, not InvalidArgument.
absl::Status Unreadable(const absl::Status& status) {
  return absl::InternalError(absl::StrCat(
      "entrokv: unreadable session from server: ", status.message()));
}

}  // namespace

absl::StatusOr<SessionConfig> EffectiveConfigFromProto(
    const v1::SessionConfig& proto) {
  SessionConfig config;
  if (absl::Status status = proto::FromProto(proto, &config); !status.ok()) {
    return Unreadable(status);
  }
  return config;
}

absl::StatusOr<SessionInfo> InfoFromProto(const v1::SessionInfo& proto) {
  SessionInfo info;
  info.id = proto.session_id();
  absl::StatusOr<SessionConfig> config =
      EffectiveConfigFromProto(proto.config());
  if (!config.ok()) return config.status();
  info.config = *config;
  if (absl::Status status = proto::FromProto(proto.stats(), &info.stats);
      !status.ok()) {
    return Unreadable(status);
  }
  info.attached = proto.attached();
  info.idle = absl::Milliseconds(proto.idle_ms());
  if (proto.has_shadows()) {
    ShadowStats shadows;
    if (absl::Status status = proto::FromProto(proto.shadows(), &shadows);
        !status.ok()) {
      return Unreadable(status);
    }
    info.shadows = std::move(shadows);
  }
  return info;
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::Status FromProto(const v1::Status& status) {
  if (status.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.code()),
                      status.message());
}

}  // namespace entrokv::client_internal
