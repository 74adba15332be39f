// What the load generator's tests share (loadgen_test.cc,
// loadgen_report_test.cc): running the entrokv-loadgen binary, reading its
// JSON report, and a small workload.

#ifndef ENTROKV_TESTS_SERVER_LOADGEN_TEST_UTIL_H_
#define ENTROKV_TESTS_SERVER_LOADGEN_TEST_UTIL_H_

#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#ifndef ENTROKV_LOADGEN_BINARY
#error "ENTROKV_LOADGEN_BINARY must name the entrokv-loadgen executable"
#endif

namespace entrokv::server::testing {

struct LoadgenRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr, or stdout alone.
};

// Runs the load generator; its output is stdout and stderr together, or
// stdout alone.
inline LoadgenRun RunLoadgen(const std::vector<std::string>& args,
                             bool with_stderr = true) {
  std::vector<std::string> quoted;
  for (const std::string& arg : args) quoted.push_back("'" + arg + "'");
  // A hung loadgen ends (exit 124) instead of hanging the test; one killed
  // by a signal (an abort) exits 128 + the signal.
  const std::string command = absl::StrCat(
      "timeout -k 5 90 '", ENTROKV_LOADGEN_BINARY, "' ",
      absl::StrJoin(quoted, " "), with_stderr ? " 2>&1" : " 2>/dev/null");
  LoadgenRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    run.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// The integer after "\"key\": " in `json` (its first occurrence); 0 when
// absent.
inline int64_t JsonInt(const std::string& json, const std::string& key) {
  const std::string prefix = absl::StrCat("\"", key, "\": ");
  const size_t at = json.find(prefix);
  if (at == std::string::npos) return 0;
  return std::strtoll(json.c_str() + at + prefix.size(), nullptr, 10);
}

// The sum of the integers after every "\"key\": " in `json`.
inline int64_t JsonSum(const std::string& json, const std::string& key) {
  const std::string prefix = absl::StrCat("\"", key, "\": ");
  int64_t sum = 0;
  for (size_t at = json.find(prefix); at != std::string::npos;
       at = json.find(prefix, at + 1)) {
    sum += std::strtoll(json.c_str() + at + prefix.size(), nullptr, 10);
  }
  return sum;
}

// The sum of the values of the flat object "\"key\": {...}" (its first
// occurrence) in `json`; -1 when absent.
inline int64_t JsonObjectSum(const std::string& json, const std::string& key) {
  const std::string prefix = absl::StrCat("\"", key, "\": {");
  const size_t at = json.find(prefix);
  if (at == std::string::npos) return -1;
  const size_t end = json.find('}', at);
  const std::string object = json.substr(at, end - at);
  int64_t sum = 0;
  for (size_t colon = object.find("\": ", prefix.size());
       colon != std::string::npos; colon = object.find("\": ", colon + 1)) {
    sum += std::strtoll(object.c_str() + colon + 3, nullptr, 10);
  }
  return sum;
}

// A small, fast workload.
inline std::vector<std::string> SmallWorkload(const std::string& target) {
  return {absl::StrCat("--target=", target),
          "--sessions=1",
          "--prefill=0",
          "--rounds=1",
          "--steps_per_round=20",
          "--layers=1",
          "--kv_heads=1",
          "--q_heads=1",
          "--head_dim=8",
          "--budget=4",
          "--policy=window",
          "--progress=false"};
}

// The number after "\"key\": " in `json` (its first occurrence); NaN when
// absent or null.
inline double JsonDouble(const std::string& json, const std::string& key) {
  const std::string prefix = absl::StrCat("\"", key, "\": ");
  const size_t at = json.find(prefix);
  if (at == std::string::npos ||
      json.compare(at + prefix.size(), 4, "null") == 0) {
    return std::nan("");
  }
  return std::strtod(json.c_str() + at + prefix.size(), nullptr);
}

}  // namespace entrokv::server::testing

#endif  // ENTROKV_TESTS_SERVER_LOADGEN_TEST_UTIL_H_
