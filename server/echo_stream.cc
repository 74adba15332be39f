#include "server/echo_stream.h"

#include <algorithm>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "entrokv/v1/entrokv.pb.h"
#include "server/raw_messages.h"
#include "server/status_conversion.h"

namespace entrokv::server {
namespace {

// Room left in a reply of `reply_bytes` for the EchoMessage's own framing (a
// tag and a length varint: at most 6 bytes) and gRPC's (a 5-byte prefix),
// with margin.
constexpr int64_t kEchoOverheadBytes = 64;

// Echo: answers each message with one message and does nothing else.
class EchoStream final : public StreamHandler {
 public:
  // `open_streams` was incremented for this stream; the destructor
  // decrements it.
  EchoStream(const ServiceLimits& limits, ServerMetrics* metrics,
             std::atomic<int64_t>* open_streams)
      : limits_(limits), metrics_(metrics), open_streams_(open_streams) {}

  ~EchoStream() override {
    open_streams_->fetch_sub(1, std::memory_order_relaxed);
  }

  grpc::Status OnMessage(grpc::ByteBuffer* request,
                         grpc::ByteBuffer* reply) override {
    absl::Status status = ParseMessage(request, &request_);
    request->Clear();
    if (status.ok()) status = MakeReply();
    if (status.ok()) status = SerializeMessage(reply_, reply);
    if (!status.ok()) {
      metrics_->Rejected(kEcho, status);
      return ToGrpcStatus(status);
    }
    return grpc::Status::OK;
  }

  grpc::Status OnReadsDone() override { return grpc::Status::OK; }

  grpc::Status OnWriteFailed() override {
    return ToGrpcStatus(absl::CancelledError("echo stream broken"));
  }

 private:
  absl::Status MakeReply() {
    const int64_t max_message = limits_.max_message_bytes;
    const int64_t max_echo = limits_.max_echo_bytes;
    if (request_.has_reply_bytes()) {
      const int64_t bytes = request_.reply_bytes();
      // The reply must fit the send limit whole, framing included; past it
      // gRPC would end the stream CANCELLED instead.
      const int64_t most =
          std::max<int64_t>(0, max_message - kEchoOverheadBytes);
      if (max_message > 0 && bytes > most) {
        return absl::InvalidArgumentError(
            absl::StrCat("reply_bytes: ", bytes,
                         " does not fit the server's max message size ",
                         max_message, " (at most ", most, " payload bytes)"));
      }
      if (max_echo > 0 && bytes > max_echo) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "reply_bytes: ", bytes, " exceeds the server's limit of ", max_echo,
            " bytes per Echo reply (--max_echo_bytes)"));
      }
      reply_.mutable_payload()->assign(static_cast<size_t>(bytes), '\0');
      return absl::OkStatus();
    }
    const int64_t bytes = static_cast<int64_t>(request_.payload().size());
    if (max_echo > 0 && bytes > max_echo) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "payload: ", bytes, " bytes exceed the server's limit of ", max_echo,
          " bytes per Echo reply (--max_echo_bytes)"));
    }
    reply_.mutable_payload()->swap(*request_.mutable_payload());
    return absl::OkStatus();
  }

  const ServiceLimits& limits_;
  ServerMetrics* const metrics_;
  std::atomic<int64_t>* const open_streams_;
  v1::EchoMessage request_;
  v1::EchoMessage reply_;
};

}  // namespace

std::unique_ptr<StreamHandler> NewEchoStream(
    const ServiceLimits& limits, ServerMetrics* metrics,
    std::atomic<int64_t>* open_streams) {
  return std::make_unique<EchoStream>(limits, metrics, open_streams);
}

}  // namespace entrokv::server
