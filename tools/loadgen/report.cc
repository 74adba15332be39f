#include "report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace entrokv::loadgen {
namespace {

struct Summary {
  int64_t count = 0;
  double steps_per_s = 0;
  Percentiles latency;
  Percentiles server;
  double sent_per_s = 0, received_per_s = 0, evicted_per_step = 0;
  // The server process per step answered (server_sampled), else negative.
  double server_cpu_us = -1, context_switches = -1;
  // The load generator's own CPU per step answered; negative with none.
  double loadgen_cpu_us = -1;
};

// `batch`: steps per latency sample (message).
Summary Summarize(ModeStats& stats, int batch) {
  Summary s;
  s.count = static_cast<int64_t>(stats.latency_ns.size());
  if (stats.wall_seconds > 0) {
    s.steps_per_s = double(s.count) * batch / stats.wall_seconds;
    s.sent_per_s = stats.bytes_sent / stats.wall_seconds;
    s.received_per_s = stats.bytes_received / stats.wall_seconds;
  }
  s.latency = ComputePercentiles(&stats.latency_ns);
  s.server = ComputePercentiles(&stats.server_ns);
  if (s.count > 0) {
    const double steps = double(s.count) * batch;  // Answered.
    s.evicted_per_step = double(stats.evicted) / steps;
    if (stats.server_sampled && stats.server_unsampled_phases == 0) {
      s.server_cpu_us = stats.server_cpu_seconds * 1e6 / steps;
      s.context_switches = double(stats.server_context_switches) / steps;
    }
    s.loadgen_cpu_us = stats.loadgen_cpu_seconds * 1e6 / steps;
  }
  return s;
}

std::string Bytes(double per_s) {
  if (per_s >= 1e9) return absl::StrFormat("%.2f GB/s", per_s / 1e9);
  if (per_s >= 1e6) return absl::StrFormat("%.2f MB/s", per_s / 1e6);
  return absl::StrFormat("%.1f kB/s", per_s / 1e3);
}

int64_t Sum(const std::map<std::string, int64_t>& counts) {
  int64_t sum = 0;
  for (const auto& [code, n] : counts) sum += n;
  return sum;
}

// "CODE=n CODE=n"; "-" when empty.
std::string CodesText(const std::map<std::string, int64_t>& counts) {
  if (counts.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [code, n] : counts) {
    parts.push_back(absl::StrCat(code, "=", n));
  }
  return absl::StrJoin(parts, " ");
}

// `value` in `format`, or null when negative (not measured).
std::string JsonOrNull(double value, const absl::FormatSpec<double>& format) {
  return value < 0 ? std::string("null") : absl::StrFormat(format, value);
}

// {"CODE": n, ...}
std::string CodesJson(const std::map<std::string, int64_t>& counts) {
  std::vector<std::string> parts;
  for (const auto& [code, n] : counts) {
    parts.push_back(absl::StrFormat("\"%s\": %d", code, n));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

std::string JsonPercentiles(const Percentiles& p) {
  return absl::StrFormat(
      "{\"p50\": %.1f, \"p90\": %.1f, \"p99\": %.1f, \"p99.9\": %.1f, "
      "\"max\": %.1f, \"mean\": %.1f}",
      p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.max_us, p.mean_us);
}

}  // namespace

void ModeStats::Merge(const ModeStats& other) {
  latency_ns.insert(latency_ns.end(), other.latency_ns.begin(),
                    other.latency_ns.end());
  server_ns.insert(server_ns.end(), other.server_ns.begin(),
                   other.server_ns.end());
  bytes_sent += other.bytes_sent;
  bytes_received += other.bytes_received;
  evicted += other.evicted;
  fallbacks += other.fallbacks;
  for (const auto& [code, n] : other.codes) codes[code] += n;
  for (const auto& [code, n] : other.not_sent) not_sent[code] += n;
  for (const auto& [code, n] : other.fallback_causes) {
    fallback_causes[code] += n;
  }
  server_sampled = server_sampled || other.server_sampled;
  server_unsampled_phases += other.server_unsampled_phases;
  server_cpu_seconds += other.server_cpu_seconds;
  server_context_switches += other.server_context_switches;
  loadgen_cpu_seconds += other.loadgen_cpu_seconds;
}

int64_t ModeStats::FailedSteps() const {
  int64_t failed = Sum(not_sent) + fallbacks;
  for (const auto& [code, n] : codes) {
    if (code != "OK") failed += n;
  }
  return failed;
}

std::map<std::string, int64_t> ModeStats::FailuresByCode() const {
  std::map<std::string, int64_t> out = not_sent;
  for (const auto& [code, n] : codes) {
    if (code != "OK") out[code] += n;
  }
  for (const auto& [code, n] : fallback_causes) out[code] += n;
  // Fallbacks without a recorded cause (none expected) still count.
  const int64_t uncaused = fallbacks - Sum(fallback_causes);
  if (uncaused > 0) out["FALLBACK"] += uncaused;
  return out;
}

bool AnyFailure(const std::map<std::string, ModeStats>& modes,
                const RunFailures& failures) {
  for (const auto& [name, stats] : modes) {
    if (stats.FailedSteps() > 0) return true;
  }
  return Sum(failures.sessions_not_started) > 0 ||
         Sum(failures.closes_failed) > 0;
}

Percentiles ComputePercentiles(std::vector<int64_t>* ns) {
  Percentiles p;
  if (ns->empty()) return p;
  std::sort(ns->begin(), ns->end());
  auto at = [&](double q) {
    const size_t rank = static_cast<size_t>(std::ceil(q * ns->size()));
    return (*ns)[std::clamp<size_t>(rank, 1, ns->size()) - 1] / 1e3;
  };
  p.p50_us = at(0.50);
  p.p90_us = at(0.90);
  p.p99_us = at(0.99);
  p.p999_us = at(0.999);
  p.max_us = ns->back() / 1e3;
  double sum = 0;
  for (const int64_t v : *ns) sum += v;
  p.mean_us = sum / ns->size() / 1e3;
  return p;
}

std::string FormatText(const RunDescription& run,
                       std::map<std::string, ModeStats>& modes,
                       const RunFailures& failures) {
  std::string out = absl::StrFormat(
      "entrokv-loadgen  target=%s  %s  policy=%s budget=%d\n"
      "  sessions=%d prefill=%d rounds=%d x %d steps/session/mode  %s  "
      "client=%s  request=%d B/step\n\n",
      run.target, run.shape, run.policy, run.budget, run.sessions, run.prefill,
      run.rounds, run.steps_per_round,
      run.rate > 0 ? absl::StrFormat("open loop %.0f steps/s", run.rate)
                   : std::string("closed loop"),
      run.client, run.request_bytes);
  if (run.batch > 1) {
    absl::StrAppendFormat(
        &out,
        "batch=%d (%s): one message carries %d sessions' steps; count and "
        "latency are per message%s, steps/s counts steps\n\n",
        run.batch, run.batch_calls, run.batch,
        run.batch_calls == "pipelined"
            ? " (its answers read after the next message is sent)"
            : "");
  }
  absl::StrAppendFormat(
      &out, "%-8s %9s %10s %8s %8s %8s %8s %9s %11s %11s %7s  %s\n", "mode",
      "count", "steps/s", "p50 us", "p90 us", "p99 us", "p99.9 us", "max us",
      "sent", "received", "evict", "status");
  std::map<std::string, Summary> summaries;
  for (auto& [name, stats] : modes) {
    Summary s = Summarize(stats, run.batch);
    summaries[name] = s;
    std::vector<std::string> codes;
    for (const auto& [code, n] : stats.codes) {
      codes.push_back(absl::StrCat(code, "=", n));
    }
    absl::StrAppendFormat(
        &out,
        "%-8s %9d %10.0f %8.1f %8.1f %8.1f %8.1f %9.1f %11s %11s %7.2f  %s\n",
        name, s.count, s.steps_per_s, s.latency.p50_us, s.latency.p90_us,
        s.latency.p99_us, s.latency.p999_us, s.latency.max_us,
        Bytes(s.sent_per_s), Bytes(s.received_per_s), s.evicted_per_step,
        absl::StrJoin(codes, " "));
  }
  if (summaries.contains("entrokv") && !modes["entrokv"].server_ns.empty()) {
    const Percentiles& p = summaries["entrokv"].server;
    absl::StrAppendFormat(&out,
                          "\nserver compute per step: p50 %.1f us, p99 %.1f "
                          "us, max %.1f us\n",
                          p.p50_us, p.p99_us, p.max_us);
    // How many cores the server keeps busy with compute: steps/s x compute
    // p50 (docs/performance.md).
    absl::StrAppendFormat(&out,
                          "cores busy with compute: %.2f (steps/s x compute "
                          "p50)\n",
                          summaries["entrokv"].steps_per_s * p.p50_us * 1e-6);
  }
  bool sampled = false;
  for (const auto& [name, s] : summaries) sampled |= s.server_cpu_us >= 0;
  if (sampled) {
    absl::StrAppendFormat(&out,
                          "\nserver process (pid %d), per step answered: CPU "
                          "time of all its threads, context switches\n",
                          run.server_pid);
    for (const auto& [name, s] : summaries) {
      if (s.server_cpu_us < 0) continue;
      absl::StrAppendFormat(&out, "  %-8s %8.1f us CPU %8.2f switches", name,
                            s.server_cpu_us, s.context_switches);
      if (name == "entrokv" && s.server.mean_us > 0) {
        absl::StrAppendFormat(&out, "  (%.1f us outside compute, its mean)",
                              s.server_cpu_us - s.server.mean_us);
      }
      absl::StrAppend(&out, "\n");
    }
  }
  bool self_measured = false;
  for (const auto& [name, s] : summaries)
    self_measured |= s.loadgen_cpu_us >= 0;
  if (self_measured) {
    absl::StrAppend(&out,
                    "load generator process, per step answered: CPU time of "
                    "all its threads\n");
    for (const auto& [name, s] : summaries) {
      if (s.loadgen_cpu_us < 0) continue;
      absl::StrAppendFormat(&out, "  %-8s %8.1f us CPU\n", name,
                            s.loadgen_cpu_us);
    }
  }
  if (run.client != "sync" && modes.contains("entrokv")) {
    absl::StrAppendFormat(
        &out,
        "client fallbacks: %d steps decided locally by the client library "
        "(not in the count, status, evictions or latency above)\n",
        modes["entrokv"].fallbacks);
  }
  int64_t failed = 0;
  for (const auto& [name, stats] : modes) failed += stats.FailedSteps();
  if (failed == 0 && !AnyFailure(modes, failures)) {
    absl::StrAppend(&out, "\nfailures: none\n");
  } else {
    absl::StrAppendFormat(
        &out, "\nfailures: %d of %d steps not answered OK by the server\n",
        failed, run.planned_steps);
    for (const auto& [name, stats] : modes) {
      absl::StrAppendFormat(
          &out,
          "  %-8s %9d  %s  (%d not sent: their stream had ended or their "
          "session never started; %d decided locally)\n",
          name, stats.FailedSteps(), CodesText(stats.FailuresByCode()),
          Sum(stats.not_sent), stats.fallbacks);
    }
    absl::StrAppendFormat(&out, "  sessions that failed to start: %s\n",
                          CodesText(failures.sessions_not_started));
    absl::StrAppendFormat(&out, "  session closes that failed: %s\n",
                          CodesText(failures.closes_failed));
  }
  absl::StrAppend(&out, PolicyTableText(run.policies));
  if (summaries.contains("entrokv") && summaries.contains("echo") &&
      summaries["echo"].latency.p50_us > 0 &&
      summaries["echo"].steps_per_s > 0) {
    absl::StrAppendFormat(
        &out,
        "\nentrokv / echo: p50 latency x%.2f, p99 x%.2f, throughput x%.2f\n",
        summaries["entrokv"].latency.p50_us / summaries["echo"].latency.p50_us,
        summaries["entrokv"].latency.p99_us / summaries["echo"].latency.p99_us,
        summaries["entrokv"].steps_per_s / summaries["echo"].steps_per_s);
  }
  return out;
}

std::string FormatJson(const RunDescription& run,
                       std::map<std::string, ModeStats>& modes,
                       const RunFailures& failures) {
  std::vector<std::string> parts;
  std::map<std::string, Summary> summaries;
  int64_t failed = 0;
  std::map<std::string, int64_t> failed_by_code;
  for (auto& [name, stats] : modes) {
    Summary s = Summarize(stats, run.batch);
    summaries[name] = s;
    const std::map<std::string, int64_t> by_code = stats.FailuresByCode();
    failed += stats.FailedSteps();
    for (const auto& [code, n] : by_code) failed_by_code[code] += n;
    parts.push_back(absl::StrFormat(
        "\"%s\": {\"count\": %d, \"steps_per_s\": %.1f, \"latency_us\": %s, "
        "\"server_compute_us\": %s, \"bytes_sent_per_s\": %.0f, "
        "\"bytes_received_per_s\": %.0f, \"evictions_per_step\": %.4f, "
        "\"server_cpu_us_per_step\": %s, "
        "\"context_switches_per_step\": %s, "
        "\"loadgen_cpu_us_per_step\": %s, "
        "\"fallbacks\": %d, \"status\": %s, \"failed\": %d, "
        "\"failures\": %s, \"not_sent\": %s, \"fallback_causes\": %s, "
        "\"wall_s\": %.3f}",
        name, s.count, s.steps_per_s, JsonPercentiles(s.latency),
        JsonPercentiles(s.server), s.sent_per_s, s.received_per_s,
        s.evicted_per_step, JsonOrNull(s.server_cpu_us, "%.2f"),
        JsonOrNull(s.context_switches, "%.4f"),
        JsonOrNull(s.loadgen_cpu_us, "%.2f"), stats.fallbacks,
        CodesJson(stats.codes), stats.FailedSteps(), CodesJson(by_code),
        CodesJson(stats.not_sent), CodesJson(stats.fallback_causes),
        stats.wall_seconds));
  }
  std::string ratios = "null";
  if (summaries.contains("entrokv") && summaries.contains("echo") &&
      summaries["echo"].latency.p50_us > 0 &&
      summaries["echo"].steps_per_s > 0) {
    ratios = absl::StrFormat(
        "{\"p50\": %.4f, \"p99\": %.4f, \"throughput\": %.4f}",
        summaries["entrokv"].latency.p50_us / summaries["echo"].latency.p50_us,
        summaries["entrokv"].latency.p99_us / summaries["echo"].latency.p99_us,
        summaries["entrokv"].steps_per_s / summaries["echo"].steps_per_s);
  }
  return absl::StrFormat(
      "{\"target\": \"%s\", \"shape\": \"%s\", \"policy\": \"%s\", "
      "\"budget\": %d, \"sessions\": %d, \"prefill\": %d, \"rounds\": %d, "
      "\"steps_per_round\": %d, \"rate\": %.1f, \"client\": \"%s\", "
      "\"request_bytes\": %d, \"batch\": %d, \"batch_calls\": \"%s\", "
      "\"modes\": {%s}, "
      "\"entrokv_over_echo\": %s, \"failures\": {\"planned_steps\": %d, "
      "\"failed_steps\": %d, \"steps_by_code\": %s, "
      "\"sessions_not_started\": %s, \"closes_failed\": %s}, "
      "\"policies\": %s}\n",
      run.target, run.shape, run.policy, run.budget, run.sessions, run.prefill,
      run.rounds, run.steps_per_round, run.rate, run.client, run.request_bytes,
      run.batch, run.batch_calls, absl::StrJoin(parts, ", "), ratios,
      run.planned_steps, failed, CodesJson(failed_by_code),
      CodesJson(failures.sessions_not_started),
      CodesJson(failures.closes_failed), PolicyTableJson(run.policies));
}

}  // namespace entrokv::loadgen
