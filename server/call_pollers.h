// gRPC's async completion-queue API on threads of our own: every call the
// server serves (docs/design.md "Threads").
//
// Each poller thread owns one completion queue. A call is asked for on a
// queue, and every event of that call comes back on it, so one thread reads
// a stream's message, runs it (a batch's steps fan out to the StepPool from
// there), starts the write of the reply and then the next read, without
// handing the stream to another thread. gRPC's callback API instead ran a
// call's callbacks on whichever of its threads polled next, which cost
// several thread hand-offs per message. That only holds while no other
// thread of the process polls: gRPC's callback and sync services (its
// default health service, the reflection services) start threads that poll
// the same sockets, so the server serves its health service itself
// (server/health_service.h) and leaves reflection off by default.
//
// Thread-safety: Start() and Stop() from one thread (the Server's); the
// pollers run on their own threads; LiveCalls is thread-safe.

#ifndef ENTROKV_SERVER_CALL_POLLERS_H_
#define ENTROKV_SERVER_CALL_POLLERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/server_builder.h"

namespace entrokv::server {

// One call on a completion queue, from the request for it to its end.
class AsyncCall {
 public:
  virtual ~AsyncCall() = default;

  // The operation `op` (the call's own numbering) came back from the queue;
  // `ok` as gRPC gives it. May delete the call.
  virtual void Proceed(int op, bool ok) = 0;
};

// What a queue's event names: the call and which of its operations.
struct CallTag {
  AsyncCall* call = nullptr;
  int op = 0;
};

// The calls of one server, alive or asked for: Stop() waits for them all to
// be deleted, and once it has begun no call asks for its successor.
class LiveCalls {
 public:
  // A call is created (true) unless the server is stopping (false: the
  // caller creates nothing).
  bool Enter();
  void Leave();  // A call is deleted.

  // Stops new calls, then waits up to `wait` for every call to be deleted;
  // false when some are left (it may be called again).
  bool StopAndWait(absl::Duration wait);

  int64_t count() const;

 private:
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

class CallPollers {
 public:
  // Asks for one call of each method on `queue` (each call asks for its
  // successor once it arrives).
  using RequestCalls =
      std::function<void(grpc::ServerCompletionQueue* queue, LiveCalls* live)>;

  // Adds `threads` (>= 1) completion queues to `builder`, which must be
  // built after this and register the services `request_calls` asks for.
  CallPollers(int threads, grpc::ServerBuilder* builder,
              RequestCalls request_calls);
  ~CallPollers();  // Stop().

  CallPollers(const CallPollers&) = delete;
  CallPollers& operator=(const CallPollers&) = delete;

  // Once the server is started: asks for the first calls on every queue and
  // starts the threads.
  void Start();

  // Once the gRPC server is shut down (Shutdown() returned: every call has
  // ended or been cancelled): lets the pollers finish what those calls
  // left, waiting for any handler still running (logged every 30 s), then
  // shuts the queues down and joins the threads. Idempotent.
  void Stop();


 private:
  const RequestCalls request_calls_;
  LiveCalls live_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_CALL_POLLERS_H_
