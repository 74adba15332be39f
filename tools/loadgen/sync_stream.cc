#include "sync_stream.h"

namespace entrokv::loadgen {

EchoSender::EchoSender(v1::EntroKv::Stub* stub, absl::Duration timeout)
    : stream_([&](grpc::ClientContext* c) { return stub->Echo(c); }, timeout) {}

bool EchoSender::RoundTrip(int64_t payload_bytes, int64_t reply_bytes,
                           ModeStats* stats) {
  request_.mutable_payload()->assign(static_cast<size_t>(payload_bytes), 'x');
  request_.set_reply_bytes(static_cast<uint32_t>(reply_bytes));
  if (!stream_.RoundTrip(request_, &response_)) return false;
  stats->bytes_sent += static_cast<int64_t>(request_.ByteSizeLong());
  stats->bytes_received += static_cast<int64_t>(response_.ByteSizeLong());
  return true;
}

absl::Status ProbeEcho(v1::EntroKv::Stub* stub) {
  // The call's own deadline bounds it whole, its opening included; the
  // watchdog has nothing to add.
  EchoStream stream(
      [&](grpc::ClientContext* c) {
        c->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
        return stub->Echo(c);
      },
      absl::InfiniteDuration());
  v1::EchoMessage request;
  request.set_reply_bytes(1);
  v1::EchoMessage reply;
  if (!stream.RoundTrip(request, &reply)) return stream.status();
  return stream.Close();
}

}  // namespace entrokv::loadgen
