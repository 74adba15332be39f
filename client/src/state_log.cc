#include "state_log.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "entrokv/client/client.h"

namespace entrokv {

void LogToStderr(std::string_view line) {
  std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
}

namespace client_internal {
namespace {

const char* Outlook(bool recovers) {
  return recovers ? "its steps are decided locally until it recovers"
                  : "its steps are decided locally for the rest of its life "
                    "(no live_keys callback)";
}

}  // namespace

void StateLog::Degraded(const absl::Status& why, bool recovers) {
  Write(kDegraded, absl::StrCat("a session lost the sidecar (", why.ToString(),
                                "); ", Outlook(recovers)));
}

void StateLog::Offline(const absl::Status& why, bool recovers) {
  Write(kOffline, absl::StrCat("a session was created offline (",
                               why.ToString(), "); ", Outlook(recovers)));
}

void StateLog::Recovered() {
  Write(kRecovered, "a session is decided by the sidecar again");
}

void StateLog::Write(Kind kind, const std::string& text) {
  if (!sink_) return;
  int64_t held_back = 0;
  {
    absl::MutexLock lock(&mu_);
    Last& last = last_[kind];
    const absl::Time now = absl::Now();
    if (now - last.written < kStateLogEvery) {
      ++last.held_back;
      return;
    }
    last.written = now;
    held_back = last.held_back;
    last.held_back = 0;
  }
  if (held_back == 0) {
    sink_(absl::StrCat("entrokv client: ", text));
  } else {
    sink_(absl::StrCat("entrokv client: ", text, " (and ", held_back,
                       " more like it since the last such message)"));
  }
}

}  // namespace client_internal
}  // namespace entrokv
