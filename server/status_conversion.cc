#include "server/status_conversion.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace entrokv::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode both number the canonical codes
  // 0..16 identically; anything outside that range is UNKNOWN.
  int code = static_cast<int>(status.code());
  if (code < 0 || code > static_cast<int>(grpc::StatusCode::UNAUTHENTICATED)) {
    code = static_cast<int>(grpc::StatusCode::UNKNOWN);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(code),
                      std::string(status.message()));
}

void ToProtoStatus(const absl::Status& status, v1::Status* out) {
  const grpc::Status converted = ToGrpcStatus(status);
  out->set_code(static_cast<int32_t>(converted.error_code()));
  out->set_message(converted.error_message());
}

absl::Status PrefixMessage(absl::string_view field_prefix,
                           const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(field_prefix, status.message()));
}

}  // namespace entrokv::server
