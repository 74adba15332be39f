#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "civetweb.h"
#include "common/build_info.h"
#include "common/prometheus_text.h"
#include "spdlog/spdlog.h"

namespace entrokv::server {
namespace {

// The longest field path kept as a label value.
constexpr size_t kMaxFieldLength = 96;

void Header(std::string* out, absl::string_view name, absl::string_view type,
            absl::string_view help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type,
                  "\n");
}

void Sample(std::string* out, absl::string_view name, absl::string_view labels,
            int64_t value) {
  absl::StrAppend(out, name, labels.empty() ? "" : "{", labels,
                  labels.empty() ? "" : "}", " ", value, "\n");
}

void Metric(std::string* out, absl::string_view name, absl::string_view type,
            absl::string_view help, int64_t value) {
  Header(out, name, type, help);
  Sample(out, name, "", value);
}

// One metric with a sample per placement.
void ByPlacement(std::string* out, absl::string_view name,
                 absl::string_view help, int64_t cpu, int64_t gpu) {
  Header(out, name, "gauge", help);
  Sample(out, name, "placement=\"cpu\"", cpu);
  Sample(out, name, "placement=\"gpu\"", gpu);
}

void Histogram(std::string* out, absl::string_view name, absl::string_view help,
               const DurationHistogram& histogram) {
  Header(out, name, "histogram", help);
  AppendHistogramSamples(out, name, "", histogram);
}

bool IsFieldChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
         c == '.';
}

// civetweb reports why it could not start through its log callback, on the
// starting thread: the lines are collected here while Start() runs.
thread_local std::string* start_log = nullptr;

int LogCivetweb(const struct mg_connection*, const char* message) {
  if (start_log != nullptr) {
    // The specific cause comes first; civetweb's summary adds nothing to it.
    if (!start_log->empty() &&
        absl::string_view(message) == "Failed to setup server ports") {
      return 1;
    }
    absl::StrAppend(start_log, start_log->empty() ? "" : "; ", message);
  } else {
    spdlog::warn("metrics endpoint: {}", message);
  }
  return 1;  // Handled: civetweb writes nothing itself.
}

}  // namespace

void DurationHistogram::Observe(int64_t ns) {
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_ns_.begin(), bounds_ns_.end(), ns) -
      bounds_ns_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
}

DurationHistogram::Snapshot DurationHistogram::Read() const {
  Snapshot snapshot;
  snapshot.counts.resize(bounds_ns_.size() + 1);
  for (size_t i = 0; i < snapshot.counts.size(); ++i) {
    snapshot.counts[i] = counts_[i].load(std::memory_order_relaxed);
  }
  snapshot.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  return snapshot;
}

void AppendHistogramSamples(std::string* out, absl::string_view name,
                            absl::string_view labels,
                            const DurationHistogram& histogram, double unit) {
  const DurationHistogram::Snapshot snapshot = histogram.Read();
  const absl::Span<const int64_t> bounds = histogram.bounds_ns();
  const absl::string_view comma = labels.empty() ? "" : ",";
  int64_t cumulative = 0;
  for (size_t i = 0; i < snapshot.counts.size(); ++i) {
    cumulative += snapshot.counts[i];
    const std::string le = i < bounds.size()
                               ? absl::StrFormat("%g", bounds[i] / unit)
                               : std::string("+Inf");
    absl::StrAppend(out, name, "_bucket{", labels, comma, "le=\"", le, "\"} ",
                    cumulative, "\n");
  }
  const absl::string_view open = labels.empty() ? "" : "{";
  const absl::string_view close = labels.empty() ? "" : "}";
  absl::StrAppend(out, name, "_sum", open, labels, close, " ",
                  absl::StrFormat("%.9f", snapshot.sum_ns / unit), "\n");
  absl::StrAppend(out, name, "_count", open, labels, close, " ", cumulative,
                  "\n");
}

std::string RejectedField(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos) return "";
  std::string field;
  int depth = 0;  // Inside "[...]".
  for (const char c : message.substr(0, colon)) {
    if (c == '[') {
      ++depth;
    } else if (c == ']') {
      if (--depth < 0) return "";
    } else if (depth > 0) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return "";
    } else if (IsFieldChar(c)) {
      field += c;
    } else {
      return "";
    }
  }
  if (depth != 0 || field.size() > kMaxFieldLength) return "";
  return field;
}

void ServerMetrics::Rejected(absl::string_view method,
                             const absl::Status& status) {
  if (status.ok()) return;
  std::string code = absl::StatusCodeToString(status.code());
  std::string field = RejectedField(status.message());
  absl::MutexLock lock(&mu_);
  RejectedKey key(std::string(method), std::move(code), std::move(field));
  auto it = rejected_.find(key);
  if (it == rejected_.end() && rejected_.size() >= kMaxRejectedSeries) {
    // Past the bound every new series folds into one per code: the method
    // too may come from a client (an unauthenticated call's path).
    std::get<0>(key) = "other";
    std::get<2>(key) = "other";
    it = rejected_.find(key);
  }
  if (it == rejected_.end()) {
    rejected_.emplace(std::move(key), 1);
  } else {
    ++it->second;
  }
}

void ServerMetrics::DrainStarted() {
  if (!draining_.exchange(true)) drains_.fetch_add(1);
}

DurationHistogram* ServerMetrics::RecallHistogram(absl::string_view role,
                                                  absl::string_view policy) {
  absl::MutexLock lock(&mu_);
  auto key = std::make_pair(std::string(role), std::string(policy));
  auto it = recall_.find(key);
  if (it != recall_.end()) return it->second.get();
  if (recall_.size() >= kMaxRecallSeries) return nullptr;
  auto histogram = std::make_unique<DurationHistogram>(kRecallBoundsPpm);
  DurationHistogram* out = histogram.get();
  recall_.emplace(std::move(key), std::move(histogram));
  return out;
}

void ServerMetrics::ObserveRecall(DurationHistogram* histogram,
                                  double recall) {
  if (histogram == nullptr || !(recall >= 0.0)) return;  // NaN too.
  histogram->Observe(std::llround(std::min(recall, 1.0) * 1e6));
}

std::string ServerMetrics::RenderText(const ServerGauges& gauges) const {
  std::string out;
  out.reserve(8192);
  Header(&out, "entrokv_build_info", "gauge",
         "Always 1; the labels say what the server was built from.");
  Sample(&out, "entrokv_build_info",
         absl::StrCat("version=\"", EscapePrometheusLabel(BuildVersion()),
                      "\",commit=\"", EscapePrometheusLabel(BuildCommit()),
                      "\",build_type=\"", EscapePrometheusLabel(BuildType()),
                      "\",cuda=\"", BuildHasCuda() ? "true" : "false", "\""),
         1);
  Metric(&out, "entrokv_sessions_open", "gauge", "Sessions open now.",
         gauges.sessions_open);
  Metric(&out, "entrokv_sessions_created_total", "counter", "Sessions created.",
         gauges.sessions_created);
  Metric(&out, "entrokv_sessions_closed_total", "counter",
         "Sessions closed by CloseSession.", gauges.sessions_closed);
  Metric(&out, "entrokv_sessions_reclaimed_total", "counter",
         "Sessions reclaimed after --idle_timeout detached.",
         gauges.sessions_reclaimed);
  Metric(&out, "entrokv_steps_total", "counter",
         "Steps run (accepted and answered with a decision or a deferral).",
         steps_.load(std::memory_order_relaxed));
  Histogram(&out, "entrokv_step_compute_seconds",
            "Time of each step in core (append, score, decide), seconds.",
            step_compute_);
  Metric(&out, "entrokv_evictions_total", "counter",
         "Entries evicted (slot ids returned to engines).",
         evictions_.load(std::memory_order_relaxed));
  Metric(&out, "entrokv_demotions_total", "counter",
         "Entries demoted to engines' host tiers (sessions with a demote "
         "tier).",
         demotions_.load(std::memory_order_relaxed));
  Metric(&out, "entrokv_promotions_total", "counter",
         "Entries promoted back from engines' host tiers (sessions with a "
         "demote tier).",
         promotions_.load(std::memory_order_relaxed));
  Metric(&out, "entrokv_live_entries", "gauge",
         "Live entries, all open sessions together, as of their last step.",
         gauges.live_entries);
  ByPlacement(&out, "entrokv_session_state_bytes",
              "Bytes of session state held, by placement.",
              gauges.cpu_bytes_held, gauges.gpu_bytes_held);

  Header(&out, "entrokv_rejected_total", "counter",
         "Requests refused: failed RPCs, streams ended with an error, and "
         "failed attach, step and detach entries of Decode messages, by RPC, "
         "gRPC status code and the field the status message names.");
  std::vector<std::pair<RejectedKey, int64_t>> rejected;
  {
    absl::MutexLock lock(&mu_);
    rejected.assign(rejected_.begin(), rejected_.end());
  }
  std::sort(rejected.begin(), rejected.end());
  for (const auto& [key, count] : rejected) {
    const auto& [method, code, field] = key;
    Sample(&out, "entrokv_rejected_total",
           absl::StrCat("method=\"", EscapePrometheusLabel(method),
                        "\",code=\"", EscapePrometheusLabel(code),
                        "\",field=\"", EscapePrometheusLabel(field), "\""),
           count);
  }

  Header(&out, "entrokv_attention_recall", "histogram",
         "Attention recall of each scored step of the sessions that carry "
         "shadow policies: the share of the step's attention mass that the "
         "live set holds, by role (session: the session's own policy; "
         "shadow; oracle: the top-B entries by the step's own attention) "
         "and canonical policy name.");
  {
    std::vector<std::pair<std::pair<std::string, std::string>,
                          const DurationHistogram*>>
        recall;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [key, histogram] : recall_) {
        recall.emplace_back(key, histogram.get());
      }
    }
    std::sort(recall.begin(), recall.end());
    for (const auto& [key, histogram] : recall) {
      AppendHistogramSamples(
          &out, "entrokv_attention_recall",
          absl::StrCat("role=\"", EscapePrometheusLabel(key.first),
                       "\",policy=\"", EscapePrometheusLabel(key.second), "\""),
          *histogram, 1e6);
    }
  }
  Metric(&out, "entrokv_shadow_bytes_reserved", "gauge",
         "Bytes the open sessions' shadowing has reserved against "
         "--max_shadow_bytes.",
         gauges.shadow_bytes_reserved);
  Metric(&out, "entrokv_max_shadow_bytes", "gauge",
         "--max_shadow_bytes (0: unlimited).", gauges.max_shadow_bytes);

  Metric(&out, "entrokv_streams_open", "gauge",
         "Decode and Echo streams open now.", gauges.streams_open);
  Metric(&out, "entrokv_streams_total", "counter",
         "Decode and Echo streams accepted.",
         streams_.load(std::memory_order_relaxed));
  Metric(&out, "entrokv_drains_total", "counter",
         "Drains begun (SIGTERM / SIGINT, or Shutdown()).",
         drains_.load(std::memory_order_relaxed));
  Metric(&out, "entrokv_draining", "gauge",
         "1 while the server drains (health NOT_SERVING), else 0.",
         draining_.load(std::memory_order_relaxed) ? 1 : 0);
  Metric(&out, "entrokv_gpu_available", "gauge",
         "1 when the server has a CUDA backend, else 0.",
         gauges.gpu_available ? 1 : 0);
  Metric(&out, "entrokv_max_sessions", "gauge",
         "--max_sessions (0: unlimited).", gauges.max_sessions);
  Metric(&out, "entrokv_max_live_entries", "gauge",
         "--max_live_entries, per session (0: unlimited).",
         gauges.max_live_entries);
  ByPlacement(&out, "entrokv_max_bytes",
              "--max_bytes (cpu) and --max_gpu_bytes (gpu) (0: unlimited).",
              gauges.max_cpu_bytes, gauges.max_gpu_bytes);
  Metric(&out, "entrokv_max_streams", "gauge", "--max_streams (0: unlimited).",
         gauges.max_streams);
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, Render render) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535 ||
      !absl::ascii_isdigit(static_cast<unsigned char>(address.back()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_listen: \"", address,
                     "\" is not host:port with a decimal port in [0, 65535]"));
  }
  std::string host = address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (host.empty()) host = "0.0.0.0";
  if (!std::all_of(host.begin(), host.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '.';
      })) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_listen: \"", address,
                     "\": the host must be an IPv4 address, localhost or "
                     "empty (every interface)"));
  }
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });

  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(std::move(render)));
  const std::string ports = absl::StrCat(host, ":", port);
  // Two worker threads: a scrape is short, and Prometheus scrapes rarely.
  const char* options[] = {"listening_ports",
                           ports.c_str(),
                           "num_threads",
                           "2",
                           "request_timeout_ms",
                           "10000",
                           "enable_keep_alive",
                           "no",
                           nullptr};
  struct mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.log_message = &LogCivetweb;
  struct mg_init_data init_data;
  init_data.callbacks = &callbacks;
  init_data.user_data = server.get();
  init_data.configuration_options = options;
  unsigned error_code = 0;
  char error_text[256] = "";
  struct mg_error_data error;
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  std::string log;
  start_log = &log;
  server->context_ = mg_start2(&init_data, &error);
  start_log = nullptr;
  if (server->context_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("metrics_listen: cannot serve HTTP on ", address, ": ",
                     log.empty() ? std::string(error_text) : log));
  }
  struct mg_server_port bound[4];
  std::memset(bound, 0, sizeof(bound));
  if (mg_get_server_ports(server->context_, 4, bound) < 1 ||
      bound[0].port <= 0) {
    return absl::UnavailableError(absl::StrCat(
        "metrics_listen: civetweb reports no bound port for ", address));
  }
  server->port_ = bound[0].port;
  server->address_ = absl::StrCat(host, ":", server->port_);
  mg_set_request_handler(server->context_, "/metrics$",
                         &MetricsHttpServer::HandleMetrics, server.get());
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (context_ == nullptr) return;
  // civetweb's accept loop looks at its stop flag only between polls of 2 s:
  // connections to the port wake it, so that stopping takes milliseconds.
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    mg_stop(context_);
    stopped.store(true);
  });
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port_));
  const std::string host = address_.substr(0, address_.rfind(':'));
  if (host == "0.0.0.0" ||
      inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  while (!stopped.load()) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
      close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stopper.join();
}

int MetricsHttpServer::HandleMetrics(struct mg_connection* connection,
                                     void* self) {
  const struct mg_request_info* request = mg_get_request_info(connection);
  const bool head = std::strcmp(request->request_method, "HEAD") == 0;
  if (!head && std::strcmp(request->request_method, "GET") != 0) {
    mg_printf(connection,
              "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\n"
              "Content-Length: 0\r\nConnection: close\r\n\r\n");
    return 405;
  }
  const std::string body = static_cast<MetricsHttpServer*>(self)->render_();
  mg_printf(connection,
            "HTTP/1.1 200 OK\r\n"
            "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            body.size());
  if (!head) mg_write(connection, body.data(), body.size());
  return 200;
}

}  // namespace entrokv::server
