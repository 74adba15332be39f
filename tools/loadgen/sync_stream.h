// SyncStream: a blocking gRPC bidi stream for the raw transport, the Decode
// stream of --client=sync and every client's Echo stream (EchoSender). Each
// round trip (and the close) is bounded by --sync_timeout through the client
// library's call watchdog (entrokv/client/raw_transport.h): gRPC's blocking
// streams have no per-message deadline, and a stopped server must not hang the
// run.
//
// A stream is finished exactly once. gRPC aborts the process
// (GRPC_CALL_ERROR_TOO_MANY_OPERATIONS) when Finish() is called twice on one
// call: a stream that broke mid-run (a drain, a dead server) was finished
// when it broke and must not be finished again when it is closed.
//
// Thread-safety: a SyncStream is used by one thread.

#ifndef ENTROKV_TOOLS_LOADGEN_SYNC_STREAM_H_
#define ENTROKV_TOOLS_LOADGEN_SYNC_STREAM_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "entrokv/client/raw_transport.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "report.h"

namespace entrokv::loadgen {

inline absl::Status ToAbsl(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// `status` with `what` before its message, its code kept.
inline absl::Status Prefixed(const char* what, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(what, status.message()));
}

template <typename W, typename R>
class SyncStream {
 public:
  // `open` starts the call on the context it is given, e.g.
  // [&](grpc::ClientContext* c) { return stub->Decode(c); }.
  template <typename Open>
  SyncStream(Open open, absl::Duration timeout)
      : timeout_(timeout), stream_(open(&context_)) {}
  ~SyncStream() {
    if (!ended_) {
      context_.TryCancel();
      (void)stream_->Finish();
    }
  }
  SyncStream(const SyncStream&) = delete;
  SyncStream& operator=(const SyncStream&) = delete;

  // Writes `request` and reads one reply. False when the stream has ended
  // (now or before): status() then says why.
  bool RoundTrip(const W& request, R* reply) {
    if (ended_) return false;
    const uint64_t ticket = Arm();
    const bool answered = stream_->Write(request) && stream_->Read(reply);
    Disarm(ticket);
    if (answered) return true;
    End();
    return false;
  }

  // Half-closes the stream if it is still open and returns its final status.
  absl::Status Close() {
    if (!ended_) {
      const uint64_t ticket = Arm();
      stream_->WritesDone();
      ended_ = true;
      status_ = ToAbsl(stream_->Finish());
      Disarm(ticket);
      if (fired_) status_ = TimedOut();
    }
    return status_;
  }

  bool ended() const { return ended_; }
  // Why the stream ended; UNAVAILABLE when the server ended it with OK while
  // a request was unanswered.
  const absl::Status& status() const { return status_; }

 private:
  // After a failed Write or Read: the server ended the call or it broke.
  void End() {
    ended_ = true;
    status_ = ToAbsl(stream_->Finish());
    if (fired_) {
      status_ = TimedOut();
    } else if (status_.ok()) {
      status_ = absl::UnavailableError("stream ended without an answer");
    }
  }
  uint64_t Arm() { return ArmCallDeadline(&context_, absl::Now() + timeout_); }
  void Disarm(uint64_t ticket) {
    if (DisarmCallDeadline(ticket)) fired_ = true;
  }
  absl::Status TimedOut() const {
    return absl::DeadlineExceededError(absl::StrCat(
        "no answer within --sync_timeout=", absl::FormatDuration(timeout_),
        "; the stream was cancelled"));
  }

  const absl::Duration timeout_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<W, R>> stream_;
  bool fired_ = false;  // Cancelled for taking longer than timeout_.
  bool ended_ = false;
  absl::Status status_;
};

using DecodeStream = SyncStream<v1::DecodeRequest, v1::DecodeResponse>;
using EchoStream = SyncStream<v1::EchoMessage, v1::EchoMessage>;

// The Echo baseline of one runner: an EchoStream and its two messages,
// reused from one round trip to the next.
class EchoSender {
 public:
  EchoSender(v1::EntroKv::Stub* stub, absl::Duration timeout);

  // Sends `payload_bytes` and asks for `reply_bytes` back; on an answer adds
  // both messages' sizes to `stats`. False when the stream has ended (now or
  // before): status() then says why.
  bool RoundTrip(int64_t payload_bytes, int64_t reply_bytes, ModeStats* stats);
  bool ended() const { return stream_.ended(); }
  const absl::Status& status() const { return stream_.status(); }
  absl::Status Close() { return stream_.Close(); }

 private:
  EchoStream stream_;
  v1::EchoMessage request_;
  v1::EchoMessage response_;
};

// One Echo round trip within 10 s: OK when the server serves Echo, else the
// stream's status (UNIMPLEMENTED when the server runs without
// --enable_echo).
absl::Status ProbeEcho(v1::EntroKv::Stub* stub);

}  // namespace entrokv::loadgen

#endif  // ENTROKV_TOOLS_LOADGEN_SYNC_STREAM_H_
