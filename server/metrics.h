// Server metrics: what the server counts, and the HTTP endpoint that serves
// them in the Prometheus text exposition format (version 0.0.4).
//
// ServerMetrics holds the counters the service updates as it works (steps,
// their compute time, evictions, streams, rejected requests, drains). The
// hot path (a step) costs a few relaxed atomic additions and no lock; a
// rejection, which is rare and cheap to refuse anyway, takes a mutex. What
// is a level rather than a count (sessions open, live entries, bytes held,
// streams open, limits) is read when a scrape comes, by the caller of
// RenderText() (Server::MetricsText()), and passed in as ServerGauges.
//
// MetricsHttpServer serves GET /metrics on one "host:port" address with
// civetweb (Debian's libcivetweb, the HTTP server prometheus-cpp embeds),
// calling a render function per scrape on one of its own two threads.
// docs/observability.md lists every metric.
//
// Thread-safety: all methods of both classes are thread-safe.

#ifndef ENTROKV_SERVER_METRICS_H_
#define ENTROKV_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

struct mg_connection;
struct mg_context;

namespace entrokv::server {

// Upper bounds, in nanoseconds, of the buckets of the RPC histograms: 10 us
// to 1 s, dense where entrokv's answers fall (tens to hundreds of us), so
// that histogram_quantile() interpolates within a few microseconds there.
inline constexpr int64_t kRpcBoundsNs[] = {
    10'000,      15'000,      20'000,      25'000,     30'000,     40'000,
    50'000,      60'000,      70'000,      80'000,     90'000,     100'000,
    125'000,     150'000,     175'000,     200'000,    250'000,    300'000,
    400'000,     500'000,     750'000,     1'000'000,  2'500'000,  5'000'000,
    10'000'000,  25'000'000,  50'000'000,  100'000'000, 250'000'000,
    500'000'000, 1'000'000'000};
// Of entrokv_step_compute_seconds: a small step's compute takes a few us, so
// 2.5, 5 and 7.5 us come before the RPC bounds.
inline constexpr int64_t kStepComputeBoundsNs[] = {
    2'500,       5'000,       7'500,       10'000,      15'000,     20'000,
    25'000,      30'000,      40'000,      50'000,      60'000,     70'000,
    80'000,      90'000,      100'000,     125'000,     150'000,    175'000,
    200'000,     250'000,     300'000,     400'000,     500'000,    750'000,
    1'000'000,   2'500'000,   5'000'000,   10'000'000,  25'000'000, 50'000'000,
    100'000'000, 250'000'000, 500'000'000, 1'000'000'000};

// A histogram of durations over fixed buckets, with atomic counts: Observe()
// is two relaxed additions and a short search, no lock.
class DurationHistogram {
 public:
  static constexpr size_t kMaxBounds = 40;

  // Buckets with upper bounds `bounds_ns` (inclusive) and a last, implicit
  // bucket for what is above. REQUIRES: `bounds_ns` ascending, at most
  // kMaxBounds long, and outliving the histogram (a constant above).
  explicit DurationHistogram(absl::Span<const int64_t> bounds_ns)
      : bounds_ns_(bounds_ns) {}

  struct Snapshot {
    std::vector<int64_t> counts;  // Per bucket, not cumulative; bounds + 1.
    int64_t sum_ns = 0;
  };

  void Observe(int64_t ns);
  Snapshot Read() const;
  absl::Span<const int64_t> bounds_ns() const { return bounds_ns_; }

 private:
  const absl::Span<const int64_t> bounds_ns_;
  std::array<std::atomic<int64_t>, kMaxBounds + 1> counts_ = {};
  std::atomic<int64_t> sum_ns_{0};
};

// Upper bounds of entrokv_attention_recall's buckets, in millionths (a
// DurationHistogram counts integers; AppendHistogramSamples divides by
// `unit`): dense above 0.9, where policies worth comparing fall.
inline constexpr int64_t kRecallBoundsPpm[] = {
    500'000, 600'000, 700'000, 750'000, 800'000, 850'000, 900'000,
    925'000, 950'000, 960'000, 970'000, 980'000, 990'000, 995'000,
    999'000, 1'000'000};

// Appends the _bucket, _sum and _count samples of `histogram` under `name`,
// each with `labels` (`key="value",...`, may be empty) before its "le";
// bounds and sum are divided by `unit` (1e9: nanoseconds as seconds). The
// caller writes the HELP and TYPE lines.
void AppendHistogramSamples(std::string* out, absl::string_view name,
                            absl::string_view labels,
                            const DurationHistogram& histogram,
                            double unit = 1e9);

// Levels read at scrape time (see the file comment). Limits of 0 mean
// unlimited, as the server flags that set them.
struct ServerGauges {
  int64_t sessions_open = 0;
  int64_t sessions_created = 0;  // Counters kept by the registry.
  int64_t sessions_closed = 0;
  int64_t sessions_reclaimed = 0;
  int64_t live_entries = 0;  // Summed over the open sessions.
  int64_t cpu_bytes_held = 0;  // entrokv_session_state_bytes.
  int64_t gpu_bytes_held = 0;
  int64_t streams_open = 0;
  bool gpu_available = false;
  int64_t max_sessions = 0;
  int64_t max_live_entries = 0;  // Per session.
  int64_t max_cpu_bytes = 0;
  int64_t max_gpu_bytes = 0;
  int64_t max_streams = 0;
  int64_t shadow_bytes_reserved = 0;
  int64_t max_shadow_bytes = 0;
};

class ServerMetrics {
 public:
  // Series of entrokv_rejected_total kept apart; past it, new combinations
  // of labels are counted under method="other", field="other" (one series
  // per code: a bound on what a client's mistakes can make the server
  // hold).
  static constexpr size_t kMaxRejectedSeries = 512;

  // A step that core ran: its compute time, the entries it evicted, and
  // with a demote tier the entries it demoted and promoted.
  void StepDone(int64_t compute_ns, int64_t evicted, int64_t demoted = 0,
                int64_t promoted = 0) {
    steps_.fetch_add(1, std::memory_order_relaxed);
    if (evicted != 0) evictions_.fetch_add(evicted, std::memory_order_relaxed);
    if (demoted != 0) demotions_.fetch_add(demoted, std::memory_order_relaxed);
    if (promoted != 0) {
      promotions_.fetch_add(promoted, std::memory_order_relaxed);
    }
    step_compute_.Observe(compute_ns);
  }
  // A Decode or Echo stream was accepted (refusals count as rejections).
  void StreamOpened() { streams_.fetch_add(1, std::memory_order_relaxed); }
  // Counts `status` (not OK) under its gRPC code and the field its message
  // names (see RejectedField()), for `method` (the RPC's name).
  void Rejected(absl::string_view method, const absl::Status& status);
  // Shutdown() began: the server drains.
  void DrainStarted();

  // Series of entrokv_attention_recall kept: (role, policy) pairs number
  // 31 policies (11 rankings x 3 controls, less window and streaming under
  // threshold) as session and as shadow, plus the oracle: 63 at most
  // (docs/observability.md); past this bound (which they cannot reach)
  // RecallHistogram() returns null.
  static constexpr size_t kMaxRecallSeries = 64;
  // The recall histogram of `role` ("session", "shadow" or "oracle") and
  // `policy` (a canonical name, "oracle" for the oracle), made on first use
  // and kept for the server's life. Takes a mutex: callers keep the pointer.
  DurationHistogram* RecallHistogram(absl::string_view role,
                                     absl::string_view policy);
  // One scored step's recall in [0, 1] (a NaN, a stopped shadow's, or a null
  // histogram: nothing).
  static void ObserveRecall(DurationHistogram* histogram, double recall);

  int64_t steps() const { return steps_.load(std::memory_order_relaxed); }

  // Every metric, in the text exposition format.
  std::string RenderText(const ServerGauges& gauges) const;

 private:
  std::atomic<int64_t> steps_{0};
  std::atomic<int64_t> evictions_{0};
  std::atomic<int64_t> demotions_{0};
  std::atomic<int64_t> promotions_{0};
  std::atomic<int64_t> streams_{0};
  std::atomic<int64_t> drains_{0};
  std::atomic<bool> draining_{false};
  DurationHistogram step_compute_{kStepComputeBoundsNs};

  // (method, code, field) -> count.
  using RejectedKey = std::tuple<std::string, std::string, std::string>;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<RejectedKey, int64_t> rejected_ ABSL_GUARDED_BY(mu_);
  // (role, policy) -> histogram; never erased, so pointers stay valid.
  absl::flat_hash_map<std::pair<std::string, std::string>,
                      std::unique_ptr<DurationHistogram>>
      recall_ ABSL_GUARDED_BY(mu_);
};

// The field a status message names: the text before its first ": " when
// that is a field path ("steps[3].append.keys: ..." -> "steps.append.keys",
// list indices dropped), "" when the message names none.
std::string RejectedField(absl::string_view message);

class MetricsHttpServer {
 public:
  // Renders the response body of one scrape.
  using Render = std::function<std::string()>;

  // Serves GET (and HEAD) /metrics on `address`: "IPv4:port" (port 0 picks a
  // free one), "localhost:port" or ":port" (every interface). Other paths
  // answer 404, other methods 405.
  // Errors: InvalidArgument (malformed address), Unavailable (cannot bind,
  // with civetweb's reason, e.g. "Address already in use").
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, Render render);

  // Stops serving; waits for the scrape in progress.
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // "host:port" with the port bound (a wildcard host as 0.0.0.0).
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  explicit MetricsHttpServer(Render render) : render_(std::move(render)) {}
  static int HandleMetrics(struct mg_connection* connection, void* self);

  const Render render_;
  struct mg_context* context_ = nullptr;
  std::string address_;
  int port_ = 0;
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_METRICS_H_
