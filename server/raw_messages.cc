#include "server/raw_messages.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace entrokv::server {
namespace {

absl::Status ParseError(const grpc::ByteBuffer& bytes,
                        const google::protobuf::MessageLite& message) {
  return absl::InvalidArgumentError(absl::StrCat(
      message.GetTypeName(), ": the message (", bytes.Length(),
      " bytes) could not be parsed: malformed protobuf, or a string field "
      "that is not UTF-8"));
}

// Empties `step` as Clear() would, but keeps its Append (emptied), and the
// capacity of the fields that carry vectors, while their capacity fits in
// `*budget` (which it lowers by what it keeps).
void ClearKeepingAppend(v1::SessionStep* step, size_t* budget) {
  const auto keep = [budget](size_t bytes) {
    if (bytes > *budget) return false;
    *budget -= bytes;
    return true;
  };
  v1::Append* append = step->has_append() ? step->release_append() : nullptr;
  step->Clear();
  if (!keep(step->queries().capacity())) {
    std::string().swap(*step->mutable_queries());
  }
  if (append == nullptr) return;
  append->Clear();
  if (!keep(append->keys().capacity() +
            append->slot_ids().Capacity() * sizeof(uint64_t) +
            static_cast<size_t>(append->pinned().Capacity()))) {
    delete append;
    return;
  }
  step->set_allocated_append(append);
}

}  // namespace

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
  return ParseError(*bytes, *out);
}

absl::Status ParseReusing(grpc::ByteBuffer* bytes,
                          v1::DecodeRequest* request) {
  // Every step held, the last message's and those left over from earlier
  // ones, is emptied and kept only as far as the new message could fill:
  // what a stream holds between messages stays within twice its largest
  // message.
  size_t budget = bytes->Valid() ? bytes->Length() : 0;
  auto* steps = request->mutable_steps();
  thread_local std::vector<v1::SessionStep*> held;  // Reused: no allocation.
  held.clear();
  while (!steps->empty()) held.push_back(steps->ReleaseLast());
  while (steps->ClearedCount() > 0) held.push_back(steps->ReleaseCleared());
  for (v1::SessionStep* step : held) {
    ClearKeepingAppend(step, &budget);
    steps->AddCleared(step);  // The parse's next step reuses it, as is.
  }
  // The rest of the message (Clear() leaves the cleared steps alone).
  request->Clear();
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
