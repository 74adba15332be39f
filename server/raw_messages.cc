#include "server/raw_messages.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace entrokv::server {

absl::Status RequireSessionId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("session_id: empty");
  return absl::OkStatus();
}

absl::Status ParseMessage(grpc::ByteBuffer* bytes,
                          google::protobuf::MessageLite* out) {
  if (!bytes->Valid()) {  // No payload at all: the empty message.
    out->Clear();
    return absl::OkStatus();
  }
  grpc::ProtoBufferReader reader(bytes);
  if (reader.status().ok() && out->ParseFromZeroCopyStream(&reader)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      out->GetTypeName(), ": the message (", bytes->Length(),
      " bytes) could not be parsed: malformed protobuf, or a string field "
      "that is not UTF-8"));
}


}  // namespace entrokv::server
