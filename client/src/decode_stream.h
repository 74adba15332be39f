// DecodeStream: one Decode bidi stream on gRPC's callback API, with a
// blocking, deadline-bounded receive for the caller's thread.
//
// Requests are queued and written one at a time in order; responses are
// queued as they arrive (one read is always outstanding), so a response that
// comes after its waiter gave up stays available. Internal to the client
// library.
//
// Thread-safety: Send() and Next() may be called from one caller thread while
// gRPC's threads run the reactions; all shared state is guarded by mu_. The
// object must not be destroyed before OnDone(): the destructor cancels the
// call and waits for it.

#ifndef ENTROKV_CLIENT_SRC_DECODE_STREAM_H_
#define ENTROKV_CLIENT_SRC_DECODE_STREAM_H_

#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace entrokv::client_internal {

class DecodeStream final
    : public grpc::ClientBidiReactor<v1::DecodeRequest, v1::DecodeResponse> {
 public:
  explicit DecodeStream(v1::EntroKv::Stub* stub);
  ~DecodeStream() override;

  // Queues `request` for writing. A request sent after the stream ended is
  // dropped (its Next() reports the stream's end).
  void Send(std::unique_ptr<v1::DecodeRequest> request);

  // The next response, in order. DeadlineExceeded when `deadline` passes
  // first (the response may still arrive later); the stream's final status
  // (Unavailable when it ended OK but early) when it ended.
  absl::StatusOr<v1::DecodeResponse> Next(absl::Time deadline);

  // Cancels the call; pending and later Next() calls report its end.
  void Cancel();

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
  std::deque<v1::DecodeResponse> responses_ ABSL_GUARDED_BY(mu_);
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_DECODE_STREAM_H_
