// DecodeStream: one Decode bidi stream as a Session drives it: Send() a
// request, Next() its response in order, each bounded by a deadline.
//
// Two implementations (SessionOptions::stream_api):
//  - Sync: gRPC's blocking ClientReaderWriter on the caller's thread; a
//    DeadlineWatchdog cancels the call when a Write or Read outlives its
//    deadline. Lowest latency (no thread hand-off), but a missed deadline
//    ends the stream.
//  - Callback: gRPC's callback API (ClientBidiReactor). Requests are queued
//    and written in order; one read is always outstanding and responses are
//    queued, so a late response stays available. Costs a thread hand-off per
//    response.
// A Session degrades on a missed deadline either way, so the two behave the
// same to the engine. Internal to the client library.
//
// Thread-safety: one caller thread at a time (the Session's); the callback
// implementation guards what gRPC's threads share with it. The destructor
// cancels the call and waits for its end.

#ifndef ENTROKV_CLIENT_SRC_DECODE_STREAM_H_
#define ENTROKV_CLIENT_SRC_DECODE_STREAM_H_

#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "deadline_watchdog.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace entrokv::client_internal {

class DecodeStream {
 public:
  virtual ~DecodeStream() = default;

  // Sends `request`, giving up (and ending the stream) at `deadline`. A
  // request sent after the stream ended is dropped (Next() reports the end).
  virtual void Send(std::unique_ptr<v1::DecodeRequest> request,
                    absl::Time deadline) = 0;

  // Reads the next response, in order, into `*response`, which it
  // replaces; the sync stream parses into its memory, so that a caller who
  // reads answers of one shape into one message allocates nothing for them
  // once warm. DeadlineExceeded when `deadline` passes first; the stream's
  // final status (Unavailable when it ended OK but early) when it ended.
  virtual absl::Status Next(absl::Time deadline,
                            v1::DecodeResponse* response) = 0;

  // Cancels the call; later Next() calls report its end.
  virtual void Cancel() = 0;

  // A request sent earlier whose write has completed, for the caller to
  // build its next message in (proto_convert::ClearForReuse), or null. The
  // stream keeps at most one.
  virtual std::unique_ptr<v1::DecodeRequest> TakeWritten() = 0;
};

// A request to build the next message of `stream` in: the one it last
// wrote, emptied by proto_convert::ClearForReuse within that message's size
// (so that a stream whose messages keep their shape allocates nothing for
// them once warm), or a new one.
std::unique_ptr<v1::DecodeRequest> ReusedRequest(DecodeStream* stream);

// REQUIRES: `stub` and `watchdog` outlive the stream.
std::unique_ptr<DecodeStream> OpenSyncDecodeStream(v1::EntroKv::Stub* stub,
                                                   DeadlineWatchdog* watchdog);
// REQUIRES: `stub` outlives the stream.
std::unique_ptr<DecodeStream> OpenCallbackDecodeStream(v1::EntroKv::Stub* stub);

class CallbackDecodeStream final
    : public DecodeStream,
      public grpc::ClientBidiReactor<v1::DecodeRequest, v1::DecodeResponse> {
 public:
  explicit CallbackDecodeStream(v1::EntroKv::Stub* stub);
  ~CallbackDecodeStream() override;

  void Send(std::unique_ptr<v1::DecodeRequest> request,
            absl::Time deadline) override;
  absl::Status Next(absl::Time deadline, v1::DecodeResponse* response) override;
  void Cancel() override;
  std::unique_ptr<v1::DecodeRequest> TakeWritten() override;

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  grpc::ClientContext context_;
  v1::DecodeResponse incoming_;  // Owned by the read in progress.

  absl::Mutex mu_;
  // Front: the write in progress when writing_.
  std::deque<std::unique_ptr<v1::DecodeRequest>> writes_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<v1::DecodeRequest> written_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::DecodeResponse> responses_ ABSL_GUARDED_BY(mu_);
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_DECODE_STREAM_H_
