// What the service's raw-bytes RPCs share (the service is registered with
// gRPC's raw API so that it can bound work on the bytes before parsing):
// parsing and serializing messages, the method names the metrics use, the
// session id check. Stateless and thread-safe.

#ifndef ENTROKV_SERVER_RAW_MESSAGES_H_
#define ENTROKV_SERVER_RAW_MESSAGES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "entrokv/v1/entrokv.pb.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "server/status_conversion.h"

namespace entrokv::server {

// The streaming RPCs' names, as the metrics label them.
inline constexpr char kDecode[] = "Decode";
inline constexpr char kEcho[] = "Echo";

// InvalidArgument naming session_id when `id` is empty.
absl::Status RequireSessionId(absl::string_view id);

// Parses `bytes` (left unchanged) into `out`. Errors: InvalidArgument naming
// the message type.
absl::Status ParseMessage(grpc::ByteBuffer* bytes,
                          google::protobuf::MessageLite* out);

// ParseMessage for the Decode stream's requests, reusing what the previous
// message parsed into `request` left allocated: its steps, each step's
// Append, and the capacity of their strings and repeated fields, up to the
// new message's size in all (so a stream holds at most twice its largest
// message between messages), so that a stream whose messages keep their
// shape allocates nothing to parse them once warm (except a step's Logits,
// which a oneof cannot keep: steps that send logits allocate them). Protobuf's
// own Clear() deletes each step's Append. A step sent without an append may
// then read as one with an empty Append: the wire gives both one meaning.
// The emptying is proto_convert::ClearForReuse, which the client library's
// message building shares.
absl::Status ParseReusing(grpc::ByteBuffer* bytes, v1::DecodeRequest* request);

// Serializes `message` into `out`. Errors: Internal naming the message type.
template <typename Message>
absl::Status SerializeMessage(const Message& message, grpc::ByteBuffer* out) {
  out->Clear();
  bool own_buffer = false;
  const grpc::Status status =
      grpc::SerializationTraits<Message>::Serialize(message, out, &own_buffer);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("could not serialize the ",
                                            message.GetTypeName(), ": ",
                                            status.error_message()));
  }
  return absl::OkStatus();
}

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_RAW_MESSAGES_H_
