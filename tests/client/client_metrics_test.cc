// The client library's metrics text (entrokv/client/metrics.h): a Client
// drives a real server in process, another one no server at all, and each
// one's MetricsText() is read by an independent parser
// (tests/testing/prometheus_text.h). Expected values follow from the story:
// a window session of budget 4 prefilled with 4 entries, then one entry per
// step, evicts one entry per step after the first; an offline session of
// budget 4 fed one entry per step evicts one entry once it holds 5.

#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client_test_util.h"
#include "entrokv/client/client.h"
#include "entrokv/client/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/prometheus_text.h"
#include "testing/status_matchers.h"

namespace entrokv::testing {
namespace {

using ::entrokv::prometheus_testing::Labels;
using ::entrokv::prometheus_testing::PrometheusText;

PrometheusText Parse(const std::string& text) {
  absl::StatusOr<PrometheusText> parsed = PrometheusText::Parse(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  return parsed.ok() ? *std::move(parsed) : PrometheusText();
}

std::unique_ptr<Client> ConnectTo(const std::string& target) {
  ClientOptions options;
  options.target = target;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

TEST(ClientMetricsTest, ServerAnsweredStepsAreCountedAndTimed) {
  std::unique_ptr<server::Server> server = StartTestServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client = ConnectTo(server->targets()[0]);
  ASSERT_NE(client, nullptr);
  const SessionConfig config = SmallConfig("window", 4, ElementType::kF32);
  SessionOptions options;
  options.step_deadline = absl::InfiniteDuration();
  options.create_deadline = absl::Seconds(10);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Session> session,
                       client->CreateSession(config, options));
  for (const StoryStep& step : MakeStory(config.shape, 4, 6)) {
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome, session->Step(step.Request()));
    ASSERT_FALSE(outcome.fallback);
  }
  ASSERT_OK(session->Close());

  const PrometheusText m = Parse(MetricsText(*client));
  const std::string p = "entrokv_client_";
  EXPECT_EQ(m.Type(p + "steps_total"), "counter");
  EXPECT_EQ(m.Value(p + "steps_total", {{"decided_by", "server"}}), 7);
  EXPECT_EQ(m.Value(p + "steps_total", {{"decided_by", "local"}}), 0);
  EXPECT_EQ(m.Value(p + "evictions_total", {{"decided_by", "server"}}), 6);
  for (const char* cause : {"deadline", "unavailable", "degraded"}) {
    EXPECT_EQ(m.Value(p + "fallbacks_total", {{"cause", cause}}), 0) << cause;
  }
  EXPECT_EQ(m.Value(p + "offline_sessions_total"), 0);
  EXPECT_EQ(m.Value(p + "recoveries_total"), 0);
  EXPECT_GT(m.Value(p + "sent_bytes_total").value_or(0), 0);
  EXPECT_GT(m.Value(p + "received_bytes_total").value_or(0), 0);

  ASSERT_OK_AND_ASSIGN(
      const double server_steps,
      m.HistogramCount(p + "step_latency_seconds", {{"decided_by", "server"}}));
  EXPECT_EQ(server_steps, 7);
  EXPECT_GT(m.Value(p + "step_latency_seconds_sum", {{"decided_by", "server"}})
                .value_or(0),
            0);
  ASSERT_OK_AND_ASSIGN(
      const double local_steps,
      m.HistogramCount(p + "step_latency_seconds", {{"decided_by", "local"}}));
  EXPECT_EQ(local_steps, 0);
}

TEST(ClientMetricsTest, OfflineSessionsAndTheirFallbacksAreCounted) {
  // No server listens on this socket: creation fails UNAVAILABLE at once.
  std::unique_ptr<Client> client = ConnectTo(absl::StrCat(
      "unix:/tmp/entrokv-client-metrics-test-", getpid(), ".sock"));
  ASSERT_NE(client, nullptr);
  const SessionConfig config = SmallConfig("window", 4, ElementType::kF32);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Session> session,
                       client->CreateSession(config));
  ASSERT_TRUE(session->degraded());
  for (const StoryStep& step : MakeStory(config.shape, 0, 5)) {
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome, session->Step(step.Request()));
    ASSERT_TRUE(outcome.fallback);
  }

  const PrometheusText m = Parse(MetricsText(*client));
  const std::string p = "entrokv_client_";
  EXPECT_EQ(m.Value(p + "offline_sessions_total"), 1);
  EXPECT_EQ(m.Value(p + "steps_total", {{"decided_by", "local"}}), 5);
  EXPECT_EQ(m.Value(p + "steps_total", {{"decided_by", "server"}}), 0);
  EXPECT_EQ(m.Value(p + "fallbacks_total", {{"cause", "unavailable"}}), 5);
  EXPECT_EQ(m.Value(p + "fallbacks_total", {{"cause", "deadline"}}), 0);
  EXPECT_EQ(m.Value(p + "evictions_total", {{"decided_by", "local"}}), 1);
  ASSERT_OK_AND_ASSIGN(
      const double local_steps,
      m.HistogramCount(p + "step_latency_seconds", {{"decided_by", "local"}}));
  EXPECT_EQ(local_steps, 5);
}

TEST(ClientMetricsTest, PrefixAndConstantLabelsApplyToEverySample) {
  ClientMetrics metrics;
  metrics.counters.recoveries = 3;
  metrics.server_latency.upper_bounds = {0.001, 0.01};
  metrics.server_latency.counts = {2, 0, 1};  // 2 <= 1 ms, 1 above 10 ms.
  metrics.server_latency.sum_seconds = 0.5;
  MetricsTextOptions options;
  options.prefix = "engine_kv_";
  options.labels = {{"engine", "a \"quoted\" \\ name"}};
  const PrometheusText m = Parse(MetricsText(metrics, options));
  const Labels engine = {{"engine", "a \"quoted\" \\ name"}};
  EXPECT_EQ(m.Value("engine_kv_recoveries_total", engine), 3);
  EXPECT_EQ(m.Value("engine_kv_step_latency_seconds_bucket",
                    {{"engine", engine.at("engine")},
                     {"decided_by", "server"},
                     {"le", "0.001"}}),
            2);
  EXPECT_EQ(m.Value("engine_kv_step_latency_seconds_bucket",
                    {{"engine", engine.at("engine")},
                     {"decided_by", "server"},
                     {"le", "0.01"}}),
            2);
  ASSERT_OK_AND_ASSIGN(const double count,
                       m.HistogramCount("engine_kv_step_latency_seconds",
                                        {{"engine", engine.at("engine")},
                                         {"decided_by", "server"}}));
  EXPECT_EQ(count, 3);
  EXPECT_FALSE(m.Value("entrokv_client_recoveries_total", engine).has_value());
}

TEST(ClientMetricsTest, EmptyMetricsAreValidText) {
  const PrometheusText m = Parse(MetricsText(ClientMetrics()));
  ASSERT_OK_AND_ASSIGN(const double count,
                       m.HistogramCount("entrokv_client_step_latency_seconds",
                                        {{"decided_by", "local"}}));
  EXPECT_EQ(count, 0);
}

TEST(ClientMetricsTest, BoundsAreIncreasingSeconds) {
  const std::vector<double> bounds = ClientMetrics::LatencyBoundsSeconds();
  ASSERT_FALSE(bounds.empty());
  EXPECT_DOUBLE_EQ(bounds.front(), 50e-6);
  EXPECT_DOUBLE_EQ(bounds.back(), 2.5);
  for (size_t i = 1; i < bounds.size(); ++i)
    EXPECT_LT(bounds[i - 1], bounds[i]);
}

}  // namespace
}  // namespace entrokv::testing
