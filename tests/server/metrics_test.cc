// The metrics endpoint (--metrics_listen): a real server in process, driven
// over gRPC, scraped over HTTP with a plain socket, its text read by an
// independent parser (tests/testing/prometheus_text.h). Expected values
// follow from what each test did: a window session of budget 8 that is
// prefilled with 8 entries and then appends one per step evicts nothing at
// its first step and one entry at each later one, and holds 8 live entries.

#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/prometheus_text.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::entrokv::prometheus_testing::PrometheusText;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct HttpResponse {
  int status = 0;
  std::string headers;  // The status line and headers.
  std::string body;
};

// One HTTP/1.0 request to 127.0.0.1:`port`, read to the end.
absl::StatusOr<HttpResponse> HttpRequest(int port, const std::string& method,
                                         const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect to port ", port));
  }
  const std::string request =
      absl::StrCat(method, " ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (send(fd, request.data(), request.size(), 0) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::InternalError("send");
  }
  std::string raw;
  char buffer[4096];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
    raw.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos || !absl::StartsWith(raw, "HTTP/1.")) {
    return absl::InternalError(absl::StrCat("not an HTTP response: ", raw));
  }
  HttpResponse response;
  response.headers = raw.substr(0, end);
  response.body = raw.substr(end + 4);
  const size_t space = raw.find(' ');
  if (!absl::SimpleAtoi(raw.substr(space + 1, 3), &response.status)) {
    return absl::InternalError("no status code");
  }
  return response;
}

class MetricsTest : public ServerTest {
 protected:
  void StartWithMetrics(ServerOptions options = TestServerOptions()) {
    options.metrics_listen = "127.0.0.1:0";
    StartServer(options);
    ASSERT_NE(server_, nullptr);
    const std::string address = server_->metrics_address();
    ASSERT_THAT(address, StartsWith("127.0.0.1:"));
    ASSERT_TRUE(
        absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port_));
    ASSERT_GT(port_, 0);
  }

  // GET /metrics, parsed.
  PrometheusText Scrape() {
    absl::StatusOr<HttpResponse> response =
        HttpRequest(port_, "GET", "/metrics");
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return PrometheusText();
    EXPECT_EQ(response->status, 200) << response->headers;
    EXPECT_THAT(response->headers,
                HasSubstr("Content-Type: text/plain; version=0.0.4"));
    absl::StatusOr<PrometheusText> text = PrometheusText::Parse(response->body);
    EXPECT_TRUE(text.ok()) << text.status() << "\n" << response->body;
    return text.ok() ? *std::move(text) : PrometheusText();
  }

  // A window session of budget 8 (f32); its id.
  std::string NewSession() {
    absl::StatusOr<std::string> id =
        CreateSessionId(stub_.get(), WindowConfig(8, ElementType::kF32));
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }

  // Runs `steps` good steps of `source` on `stream`.
  void RunSteps(DecodeStream& stream, WireStepSource& source, int steps) {
    for (int i = 0; i < steps; ++i) {
      absl::StatusOr<v1::SessionStepResult> result = stream.Step(source.Next());
      ASSERT_TRUE(result.ok()) << result.status();
    }
  }

  // Waits until the server counts `streams` open streams (a stream's end
  // reaches the server's count just after the client sees it).
  void AwaitOpenStreams(int64_t streams) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (server_->open_streams() != streams && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_EQ(server_->open_streams(), streams);
  }

  int port_ = 0;
};

TEST_F(MetricsTest, CountsWhatClientsDid) {
  StartWithMetrics();
  const std::string a = NewSession();
  const std::string b = NewSession();
  DecodeStream stream_a(stub_.get());
  DecodeStream stream_b(stub_.get());
  ASSERT_OK(stream_a.Attach(a));
  ASSERT_OK(stream_b.Attach(b));
  WireStepSource source_a(SmallShape(ElementType::kF32), 1, a);
  WireStepSource source_b(SmallShape(ElementType::kF32), 2, b);
  RunSteps(stream_a, source_a, 5);  // 4 evictions.
  RunSteps(stream_b, source_b, 3);  // 2 evictions.

  // One step with a key one byte short: INVALID_ARGUMENT naming
  // steps[0].append.keys; and one GetSession of an unknown id: NOT_FOUND
  // naming session_id.
  v1::SessionStep bad = source_a.Next();
  bad.mutable_append()->mutable_keys()->pop_back();
  EXPECT_EQ(stream_a.Step(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetSession(stub_.get(), "no-such-session").status().code(),
            absl::StatusCode::kNotFound);

  // b's stream ends and b is closed; a stays open on its stream.
  ASSERT_OK(stream_b.Close());
  ASSERT_OK(CloseSession(stub_.get(), b).status());
  AwaitOpenStreams(1);

  const PrometheusText m = Scrape();
  EXPECT_EQ(m.Value("entrokv_steps_total"), 8);
  EXPECT_EQ(m.Value("entrokv_evictions_total"), 6);
  EXPECT_EQ(m.Value("entrokv_sessions_open"), 1);
  EXPECT_EQ(m.Value("entrokv_sessions_created_total"), 2);
  EXPECT_EQ(m.Value("entrokv_sessions_closed_total"), 1);
  EXPECT_EQ(m.Value("entrokv_sessions_reclaimed_total"), 0);
  EXPECT_EQ(m.Value("entrokv_live_entries"), 8);
  EXPECT_EQ(m.Value("entrokv_streams_open"), 1);
  EXPECT_EQ(m.Value("entrokv_streams_total"), 2);
  EXPECT_EQ(m.Value("entrokv_drains_total"), 0);
  EXPECT_EQ(m.Value("entrokv_draining"), 0);

  // Session a holds 8 entries of 2 layers x 2 kv heads x 16 f32: at least
  // their keys' 8 * 256 bytes, on the CPU.
  EXPECT_GE(m.Value("entrokv_session_state_bytes", {{"placement", "cpu"}}).value_or(0),
            8 * 2 * 2 * 16 * 4);
  EXPECT_EQ(m.Value("entrokv_session_state_bytes", {{"placement", "gpu"}}), 0);
  EXPECT_EQ(m.Type("entrokv_session_state_bytes"), "gauge");

  EXPECT_EQ(m.Type("entrokv_rejected_total"), "counter");
  EXPECT_EQ(m.Value("entrokv_rejected_total", {{"method", "Decode"},
                                               {"code", "INVALID_ARGUMENT"},
                                               {"field", "steps.append.keys"}}),
            1);
  EXPECT_EQ(m.Value("entrokv_rejected_total", {{"method", "GetSession"},
                                               {"code", "NOT_FOUND"},
                                               {"field", "session_id"}}),
            1);
  EXPECT_EQ(m.Samples("entrokv_rejected_total").size(), 2u);

  ASSERT_OK_AND_ASSIGN(const double count,
                       m.HistogramCount("entrokv_step_compute_seconds"));
  EXPECT_EQ(count, 8);
  EXPECT_GT(m.Value("entrokv_step_compute_seconds_sum").value_or(0), 0);

  const ServerOptions defaults = TestServerOptions();
  EXPECT_EQ(m.Value("entrokv_max_sessions"), defaults.max_sessions);
  EXPECT_EQ(m.Value("entrokv_max_bytes", {{"placement", "cpu"}}),
            defaults.max_bytes);
  EXPECT_EQ(m.Value("entrokv_gpu_available"), 0);
  for (const char* family :
       {"entrokv_steps_total", "entrokv_step_compute_seconds",
        "entrokv_sessions_open", "entrokv_rejected_total"}) {
    EXPECT_TRUE(m.HasHelp(family)) << family;
  }
}

TEST_F(MetricsTest, StepCountsAccumulateAcrossScrapes) {
  StartWithMetrics();
  const std::string id = NewSession();
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(id));
  WireStepSource source(SmallShape(ElementType::kF32), 3, id);
  RunSteps(stream, source, 2);
  EXPECT_EQ(Scrape().Value("entrokv_steps_total"), 2);
  RunSteps(stream, source, 3);
  const PrometheusText m = Scrape();
  EXPECT_EQ(m.Value("entrokv_steps_total"), 5);
  ASSERT_OK_AND_ASSIGN(const double count,
                       m.HistogramCount("entrokv_step_compute_seconds"));
  EXPECT_EQ(count, 5);
}

TEST_F(MetricsTest, CountsSessionsReclaimedWhenIdle) {
  ServerOptions options = TestServerOptions();
  options.idle_timeout = absl::Milliseconds(50);
  options.reap_interval = absl::Milliseconds(10);
  StartWithMetrics(options);
  NewSession();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (server_->registry().size() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const PrometheusText m = Scrape();
  EXPECT_EQ(m.Value("entrokv_sessions_reclaimed_total"), 1);
  EXPECT_EQ(m.Value("entrokv_sessions_open"), 0);
}

TEST_F(MetricsTest, ServesOnlyGetAndHeadOnMetricsPath) {
  StartWithMetrics();
  ASSERT_OK_AND_ASSIGN(HttpResponse other, HttpRequest(port_, "GET", "/"));
  EXPECT_EQ(other.status, 404);
  ASSERT_OK_AND_ASSIGN(HttpResponse post,
                       HttpRequest(port_, "POST", "/metrics"));
  EXPECT_EQ(post.status, 405);
  ASSERT_OK_AND_ASSIGN(HttpResponse head,
                       HttpRequest(port_, "HEAD", "/metrics"));
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
}

TEST_F(MetricsTest, DrainIsCounted) {
  StartWithMetrics();
  server_->Shutdown(absl::ZeroDuration());
  ASSERT_OK_AND_ASSIGN(const PrometheusText m,
                       PrometheusText::Parse(server_->MetricsText()));
  EXPECT_EQ(m.Value("entrokv_drains_total"), 1);
  EXPECT_EQ(m.Value("entrokv_draining"), 1);
  // The endpoint stops with the server.
  EXPECT_FALSE(HttpRequest(port_, "GET", "/metrics").ok());
}

TEST_F(MetricsTest, NoEndpointUnlessAsked) {
  StartServer();
  EXPECT_EQ(server_->metrics_address(), "");
}

TEST_F(MetricsTest, BusyPortIsAClearError) {
  StartWithMetrics();
  ServerOptions options = TestServerOptions();
  options.metrics_listen = server_->metrics_address();
  absl::StatusOr<std::unique_ptr<Server>> second = Server::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("metrics_listen"));
  EXPECT_THAT(second.status().message(), HasSubstr("Address already in use"));
}

TEST_F(MetricsTest, MalformedAddressIsRejected) {
  for (const char* address : {"9464", "127.0.0.1:", "127.0.0.1:70000",
                              "example.com:9464", "127.0.0.1:94x"}) {
    ServerOptions options = TestServerOptions();
    options.metrics_listen = address;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument)
        << address << ": " << server.status();
  }
}

TEST(RejectedFieldTest, NamesTheFieldWithoutListIndices) {
  EXPECT_EQ(RejectedField("steps[3].append.keys: 12 bytes, expected 16"),
            "steps.append.keys");
  EXPECT_EQ(RejectedField("config.budget: 0 is below 1"), "config.budget");
  EXPECT_EQ(RejectedField("session_id: no open session x: y"), "session_id");
  EXPECT_EQ(RejectedField("Echo is disabled on this server"), "");
  EXPECT_EQ(RejectedField("session abc def: bad"), "");
  EXPECT_EQ(RejectedField("steps[x].queries: bad"), "");
}

TEST(ServerMetricsTest, BoundsTheRejectedSeries) {
  ServerMetrics metrics;
  for (size_t i = 0; i < ServerMetrics::kMaxRejectedSeries + 10; ++i) {
    metrics.Rejected("Decode", absl::InvalidArgumentError(
                                   absl::StrCat("field", i, ": bad")));
  }
  ASSERT_OK_AND_ASSIGN(const PrometheusText m,
                       PrometheusText::Parse(metrics.RenderText({})));
  EXPECT_EQ(m.Samples("entrokv_rejected_total").size(),
            ServerMetrics::kMaxRejectedSeries + 1);
  EXPECT_EQ(m.Value("entrokv_rejected_total", {{"method", "other"},
                                               {"code", "INVALID_ARGUMENT"},
                                               {"field", "other"}}),
            10);
  // Methods past the bound (e.g. unauthenticated calls' paths) fold too.
  for (int i = 0; i < 100; ++i) {
    metrics.Rejected(absl::StrCat("Method", i),
                     absl::UnauthenticatedError("authorization: no token"));
  }
  ASSERT_OK_AND_ASSIGN(const PrometheusText after,
                       PrometheusText::Parse(metrics.RenderText({})));
  EXPECT_EQ(after.Samples("entrokv_rejected_total").size(),
            ServerMetrics::kMaxRejectedSeries + 2);
  EXPECT_EQ(after.Value("entrokv_rejected_total",
                        {{"method", "other"},
                         {"code", "UNAUTHENTICATED"},
                         {"field", "other"}}),
            100);
}

TEST(DurationHistogramTest, PutsEachDurationInTheFirstBucketThatHoldsIt) {
  ServerMetrics metrics;
  metrics.StepDone(5'000, 0);          // le 5e-06 (bounds are inclusive).
  metrics.StepDone(5'001, 0);          // le 1e-05.
  metrics.StepDone(3'000'000'000, 2);  // +Inf only.
  ASSERT_OK_AND_ASSIGN(const PrometheusText m,
                       PrometheusText::Parse(metrics.RenderText({})));
  const std::string bucket = "entrokv_step_compute_seconds_bucket";
  EXPECT_EQ(m.Value(bucket, {{"le", "5e-06"}}), 1);
  EXPECT_EQ(m.Value(bucket, {{"le", "1e-05"}}), 2);
  EXPECT_EQ(m.Value(bucket, {{"le", "1"}}), 2);
  EXPECT_EQ(m.Value(bucket, {{"le", "+Inf"}}), 3);
  EXPECT_DOUBLE_EQ(m.Value("entrokv_step_compute_seconds_sum").value_or(0),
                   3.000010001);
  EXPECT_EQ(m.Value("entrokv_evictions_total"), 2);
}

}  // namespace
}  // namespace entrokv::server::testing
