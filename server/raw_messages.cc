#include "server/raw_messages.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "proto/convert/message_reuse.h"

namespace entrokv::server {
namespace {

absl::Status ParseError(const grpc::ByteBuffer& bytes,
                        const google::protobuf::MessageLite& message) {
  return absl::InvalidArgumentError(absl::StrCat(
      message.GetTypeName(), ": the message (", bytes.Length(),
      " bytes) could not be parsed: malformed protobuf, or a string field "
      "that is not UTF-8"));
}

}  // namespace

absl::Status RequireSessionId(absl::string_view id) {
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
  return ParseError(*bytes, *out);
}

absl::Status ParseReusing(grpc::ByteBuffer* bytes,
                          v1::DecodeRequest* request) {
  // Every step held is kept only as far as the new message could fill: what
  // a stream holds between messages stays within twice its largest message.
  proto_convert::ClearForReuse(bytes->Valid() ? bytes->Length() : 0, request);
  if (!bytes->Valid()) return absl::OkStatus();
  grpc::ProtoBufferReader reader(bytes);
  if (reader.status().ok()) {
    google::protobuf::io::CodedInputStream input(&reader);
    if (request->MergeFromCodedStream(&input) &&
        input.ConsumedEntireMessage()) {
      return absl::OkStatus();
    }
  }
  return ParseError(*bytes, *request);
}

}  // namespace entrokv::server
