// Client metrics: what a Client counted, and its rendering in the Prometheus
// text exposition format (version 0.0.4), for an engine to serve on its own
// metrics endpoint next to its other metrics.
//
// Client::metrics() returns a ClientMetrics: the summed SessionCounters of
// every session the client made (session.h) and two histograms of step
// latency (from a step's send to its result, as the engine sees it): one of
// the steps the server answered, one of the steps decided locally (a
// fallback; one that waited for its deadline counts the whole wait). Then
//
//   std::string text = entrokv::MetricsText(*client);
//
// renders them; an engine that serves Prometheus itself appends `text` to its
// own response body (the names do not clash: each starts with
// MetricsTextOptions::prefix). docs/observability.md lists every metric. The
// histograms' bounds are fixed (ClientMetrics::LatencyBoundsSeconds()).
//
// Thread-safety: MetricsText() is a pure function; Client::metrics() is
// thread-safe (each counter is read atomically; the set is not one
// snapshot).

#ifndef ENTROKV_CLIENT_METRICS_H_
#define ENTROKV_CLIENT_METRICS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "entrokv/client/session.h"

namespace entrokv {

class Client;

struct LatencyHistogram {
  // Upper bounds of the buckets, in seconds, increasing; a last, implicit
  // bucket (le="+Inf") takes what is above.
  std::vector<double> upper_bounds;
  // Observations per bucket (not cumulative): upper_bounds.size() + 1.
  std::vector<int64_t> counts;
  double sum_seconds = 0.0;

  int64_t count() const {
    int64_t total = 0;
    for (const int64_t n : counts) total += n;
    return total;
  }
};

struct ClientMetrics {
  // The bounds of both histograms: 50 us to 2.5 s.
  static std::vector<double> LatencyBoundsSeconds();

  SessionCounters counters;
  LatencyHistogram server_latency;  // Steps the server answered.
  LatencyHistogram local_latency;   // Steps decided locally (fallbacks).
};

struct MetricsTextOptions {
  // Starts every metric name.
  std::string prefix = "entrokv_client_";
  // Added to every sample, e.g. {{"engine", "vllm-0"}} when one process
  // serves several clients. Names must match [a-zA-Z_][a-zA-Z0-9_]* and not
  // be "le", "cause" or "decided_by"; values are escaped.
  std::vector<std::pair<std::string, std::string>> labels;
};

// `metrics` in the text exposition format, ending with a newline.
std::string MetricsText(const ClientMetrics& metrics,
                        const MetricsTextOptions& options = {});
// Shorthand for MetricsText(client.metrics(), options).
std::string MetricsText(const Client& client,
                        const MetricsTextOptions& options = {});

}  // namespace entrokv

#endif  // ENTROKV_CLIENT_METRICS_H_
