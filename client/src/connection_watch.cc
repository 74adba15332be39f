#include "connection_watch.h"

#include <utility>

#include "absl/time/clock.h"

namespace entrokv::client_internal {

ConnectionWatch::ConnectionWatch(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)), thread_([this] { Run(); }) {}

ConnectionWatch::~ConnectionWatch() {
  stop_.Notify();
  thread_.join();
}

void ConnectionWatch::Run() {
  while (!stop_.HasBeenNotified()) {
    const grpc_connectivity_state state =
        channel_->GetState(/*try_to_connect=*/false);
    if (state == GRPC_CHANNEL_CONNECTING ||
        state == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      // Returns on a change of state or at the deadline; polls meanwhile.
      channel_->WaitForStateChange(state,
                                   absl::ToChronoTime(absl::Now() + kEvery));
    } else {
      stop_.WaitForNotificationWithTimeout(kEvery);
    }
  }
}

}  // namespace entrokv::client_internal
