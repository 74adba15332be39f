// StateLog: the client library's messages about its sessions' link to the
// sidecar (degraded, created offline, recovered), so that an outage does not
// pass unnoticed. Each kind of message is written at most once per
// kStateLogEvery per Client; the next one says how many were held back.
//
// Thread-safety: thread-safe.

#ifndef ENTROKV_CLIENT_SRC_STATE_LOG_H_
#define ENTROKV_CLIENT_SRC_STATE_LOG_H_

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace entrokv {
namespace client_internal {

inline constexpr absl::Duration kStateLogEvery = absl::Seconds(10);

class StateLog {
 public:
  // `sink` null: nothing is written.
  explicit StateLog(std::function<void(std::string_view)> sink)
      : sink_(std::move(sink)) {}

  // A session fell back to deciding locally; `recovers` says whether it has
  // live_keys to come back with.
  void Degraded(const absl::Status& why, bool recovers);
  // A session was created offline (the sidecar did not answer).
  void Offline(const absl::Status& why, bool recovers);
  // A session is decided by the server again.
  void Recovered();

 private:
  enum Kind { kDegraded, kOffline, kRecovered, kKinds };
  void Write(Kind kind, const std::string& text);

  const std::function<void(std::string_view)> sink_;
  absl::Mutex mu_;
  struct Last {
    absl::Time written = absl::InfinitePast();
    int64_t held_back = 0;
  };
  std::array<Last, kKinds> last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace client_internal
}  // namespace entrokv

#endif  // ENTROKV_CLIENT_SRC_STATE_LOG_H_
