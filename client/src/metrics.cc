#include "entrokv/client/metrics.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/prometheus_text.h"
#include "counter_totals.h"
#include "entrokv/client/client.h"

namespace entrokv {
namespace {

// Writes one family: its HELP and TYPE lines once, then samples.
class Writer {
 public:
  explicit Writer(const MetricsTextOptions& options) : prefix_(options.prefix) {
    for (const auto& [name, value] : options.labels) {
      absl::StrAppend(&constant_, constant_.empty() ? "" : ",", name, "=\"",
                      EscapePrometheusLabel(value), "\"");
    }
  }

  void Header(absl::string_view name, absl::string_view type,
              absl::string_view help) {
    absl::StrAppend(&out_, "# HELP ", prefix_, name, " ", help, "\n# TYPE ",
                    prefix_, name, " ", type, "\n");
  }

  // `labels`: "a=\"x\",b=\"y\"" or empty.
  void Sample(absl::string_view name, absl::string_view labels,
              absl::string_view value) {
    std::string all = constant_;
    if (!labels.empty()) absl::StrAppend(&all, all.empty() ? "" : ",", labels);
    absl::StrAppend(&out_, prefix_, name, all.empty() ? "" : "{", all,
                    all.empty() ? "" : "}", " ", value, "\n");
  }
  void Sample(absl::string_view name, absl::string_view labels, int64_t value) {
    Sample(name, labels, absl::StrCat(value));
  }

  void Counter(absl::string_view name, absl::string_view help, int64_t value) {
    Header(name, "counter", help);
    Sample(name, "", value);
  }

  // The buckets, sum and count of `histogram`, with `labels` (no header).
  void Histogram(absl::string_view name, absl::string_view labels,
                 const LatencyHistogram& histogram) {
    const std::string bucket = absl::StrCat(name, "_bucket");
    const std::string prefix = labels.empty() ? "" : absl::StrCat(labels, ",");
    // One bucket per bound and +Inf, whatever `counts` holds.
    int64_t cumulative = 0;
    for (size_t i = 0; i <= histogram.upper_bounds.size(); ++i) {
      if (i < histogram.counts.size()) cumulative += histogram.counts[i];
      const std::string le =
          i < histogram.upper_bounds.size()
              ? absl::StrFormat("%g", histogram.upper_bounds[i])
              : std::string("+Inf");
      Sample(bucket, absl::StrCat(prefix, "le=\"", le, "\""), cumulative);
    }
    Sample(absl::StrCat(name, "_sum"), labels,
           absl::StrFormat("%.9f", histogram.sum_seconds));
    Sample(absl::StrCat(name, "_count"), labels, cumulative);
  }

  std::string Take() { return std::move(out_); }

 private:
  const std::string prefix_;
  std::string constant_;  // The options' labels, rendered.
  std::string out_;
};

}  // namespace

std::vector<double> ClientMetrics::LatencyBoundsSeconds() {
  std::vector<double> bounds;
  for (const int64_t ns : client_internal::CounterTotals::kLatencyBoundsNs) {
    bounds.push_back(static_cast<double>(ns) / 1e9);
  }
  return bounds;
}

std::string MetricsText(const ClientMetrics& metrics,
                        const MetricsTextOptions& options) {
  const SessionCounters& c = metrics.counters;
  Writer w(options);
  w.Header("steps_total", "counter",
           "Steps answered, by who decided them: the server, or the library "
           "locally (a fallback).");
  w.Sample("steps_total", "decided_by=\"server\"", c.server_steps);
  w.Sample("steps_total", "decided_by=\"local\"", c.fallback_steps);
  w.Header("fallbacks_total", "counter",
           "Steps decided locally, by cause: deadline (the step deadline "
           "passed), unavailable (stream broken or session offline), degraded "
           "(an earlier step of the session fell back).");
  w.Sample("fallbacks_total", "cause=\"deadline\"", c.fallback_deadline);
  w.Sample("fallbacks_total", "cause=\"unavailable\"", c.fallback_unavailable);
  w.Sample("fallbacks_total", "cause=\"degraded\"", c.fallback_degraded);
  w.Counter("rejected_steps_total",
            "Steps rejected (bad input), by the server or by the library.",
            c.rejected_steps);
  w.Header("evictions_total", "counter",
           "Entries the engine was told to free, by who decided.");
  w.Sample("evictions_total", "decided_by=\"server\"", c.evicted_by_server);
  w.Sample("evictions_total", "decided_by=\"local\"", c.evicted_by_fallback);
  w.Counter("sent_bytes_total", "Serialized request bytes sent.", c.bytes_sent);
  w.Counter("received_bytes_total", "Serialized response bytes received.",
            c.bytes_received);
  w.Counter("offline_sessions_total",
            "Sessions created offline (the server unreachable, silent or at a "
            "limit): every step decided locally.",
            c.offline_sessions);
  w.Counter("unconfirmed_closes_total",
            "Session closes the server did not confirm in time (completed "
            "locally).",
            c.unconfirmed_closes);
  w.Counter("recovery_attempts_total",
            "Attempts to bring a degraded session back online.",
            c.recovery_attempts);
  w.Counter("recoveries_total", "Degraded sessions brought back online.",
            c.recoveries);
  w.Header("step_latency_seconds", "histogram",
           "Step latency as the engine sees it (StepOutcome::latency: from "
           "the step's send to its result), by who decided.");
  w.Histogram("step_latency_seconds", "decided_by=\"server\"",
              metrics.server_latency);
  w.Histogram("step_latency_seconds", "decided_by=\"local\"",
              metrics.local_latency);
  return w.Take();
}

std::string MetricsText(const Client& client,
                        const MetricsTextOptions& options) {
  return MetricsText(client.metrics(), options);
}

}  // namespace entrokv
