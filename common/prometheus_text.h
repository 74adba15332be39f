// Prometheus text exposition format (0.0.4) helpers shared by the server's
// /metrics page (server/metrics.cc) and the client library's MetricsText()
// (client/src/metrics.cc).

#ifndef ENTROKV_COMMON_PROMETHEUS_TEXT_H_
#define ENTROKV_COMMON_PROMETHEUS_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace entrokv {

// A label value with \, " and newline escaped, as the format requires.
inline std::string EscapePrometheusLabel(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace entrokv

#endif  // ENTROKV_COMMON_PROMETHEUS_TEXT_H_
