// The server's log line format: spdlog's text lines (the default) or one
// JSON object per line (--log_format=json):
//   {"ts":"2026-12-03T06:18:45.123456Z","level":"info","msg":"...",
//    "session":"s-1","step":42}
// "session" and "step" appear on lines logged inside a ScopedLogFields that
// sets them. Strings are escaped per RFC 8259; bytes that are not UTF-8
// become U+FFFD, so every line parses.
//
// Thread-safety: SetLogFormat() before other threads log; ScopedLogFields is
// per thread.

#ifndef ENTROKV_SERVER_LOG_FORMAT_H_
#define ENTROKV_SERVER_LOG_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace entrokv::server {

// "text" or "json"; applies to spdlog's default logger. Errors:
// InvalidArgument for another name.
absl::Status SetLogFormat(absl::string_view format);

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view text);

// Session and step of what this thread logs until destruction (nestable: the
// innermost wins; unset fields fall through to the outer scope).
class ScopedLogFields {
 public:
  explicit ScopedLogFields(absl::string_view session,
                           std::optional<uint64_t> step = std::nullopt);
  ~ScopedLogFields();
  ScopedLogFields(const ScopedLogFields&) = delete;
  ScopedLogFields& operator=(const ScopedLogFields&) = delete;

 private:
  const ScopedLogFields* outer_;
  std::string session_;
  std::optional<uint64_t> step_;
  friend class JsonFormatter;
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_LOG_FORMAT_H_
