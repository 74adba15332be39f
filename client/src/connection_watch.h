// ConnectionWatch: keeps a channel's reconnection moving while it is down.
//
// gRPC (1.51, Debian's) handles the socket events of a connection attempt
// only while some thread polls the channel: a call that waits, or a watch of
// its connectivity state. While the sidecar is down an engine sends no call
// that waits (calls fail fast in TRANSIENT_FAILURE, and offline sessions
// send none), so an attempt's outcome was noticed only by gRPC's backup
// poller, every 5 s: a restarted sidecar was connected again up to 5 s after
// it listened, whatever the reconnect backoff (tests/client/restart_test.cc).
// The watch is one thread per Client that, while the channel is connecting
// or in TRANSIENT_FAILURE, waits on its state changes, which polls it. While
// the channel is READY or IDLE it only looks at the state, every kEvery, and
// polls nothing, so the engine's streams are served by their own threads as
// before. Thread-safe; the destructor returns within kEvery.

#ifndef ENTROKV_CLIENT_SRC_CONNECTION_WATCH_H_
#define ENTROKV_CLIENT_SRC_CONNECTION_WATCH_H_

#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace entrokv::client_internal {

class ConnectionWatch {
 public:
  static constexpr absl::Duration kEvery = absl::Milliseconds(50);

  explicit ConnectionWatch(std::shared_ptr<grpc::Channel> channel);
  ~ConnectionWatch();

  ConnectionWatch(const ConnectionWatch&) = delete;
  ConnectionWatch& operator=(const ConnectionWatch&) = delete;

 private:
  void Run();

  const std::shared_ptr<grpc::Channel> channel_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace entrokv::client_internal

#endif  // ENTROKV_CLIENT_SRC_CONNECTION_WATCH_H_
