// The gRPC server metrics (server/grpc_metrics.h), process_* and
// entrokv_build_info on a real server in process, driven over gRPC, its
// page read by the independent parser (tests/testing/prometheus_text.h).
// The code names and bucket bounds below are written out by hand from the
// go-grpc-prometheus conventions and issue #23, not taken from the server.

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ctime>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/process_metrics.h"
#include "server_test_util.h"
#include "testing/prometheus_text.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::entrokv::prometheus_testing::Labels;
using ::entrokv::prometheus_testing::PrometheusText;

// When this test program started, by the wall clock (static initialization).
const std::time_t kProgramStart = std::time(nullptr);

constexpr const char* kService = "entrokv.v1.EntroKv";

// Go's codes.Code names, as go-grpc-prometheus labels grpc_code.
const std::vector<std::string> kGoCodeNames = {
    "OK",           "Canceled",          "Unknown",
    "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted",
    "FailedPrecondition", "Aborted",     "OutOfRange",
    "Unimplemented", "Internal",          "Unavailable",
    "DataLoss",      "Unauthenticated"};

Labels Method(const std::string& method, const std::string& type,
              const std::string& service = kService) {
  return {{"grpc_type", type},
          {"grpc_service", service},
          {"grpc_method", method}};
}

Labels WithCode(Labels labels, const std::string& code) {
  labels["grpc_code"] = code;
  return labels;
}

class GrpcMetricsTest : public ServerTest {
 protected:
  PrometheusText Page() {
    absl::StatusOr<PrometheusText> text =
        PrometheusText::Parse(server_->MetricsText());
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *std::move(text) : PrometheusText();
  }

  // The _count of histogram `name` with `labels`, checked (buckets,
  // +Inf); -1 when malformed or missing.
  double Count(const PrometheusText& page, const std::string& name,
               const Labels& labels) {
    absl::StatusOr<double> count = page.HistogramCount(name, labels);
    EXPECT_TRUE(count.ok()) << count.status();
    return count.value_or(-1);
  }

  // The value of `name` with `labels`, -1 when the series is missing.
  double Get(const PrometheusText& page, const std::string& name,
             const Labels& labels) {
    return page.Value(name, labels).value_or(-1);
  }
};

TEST_F(GrpcMetricsTest, EveryMethodAndCodeHasASeriesBeforeAnyCall) {
  StartServer();
  const PrometheusText page = Page();
  const std::vector<Labels> methods = {
      Method("CreateSession", "unary"),  Method("CloseSession", "unary"),
      Method("GetSession", "unary"),     Method("ListSessions", "unary"),
      Method("Decode", "bidi_stream"),   Method("Echo", "bidi_stream"),
      Method("Check", "unary", "grpc.health.v1.Health"),
      Method("Watch", "server_stream", "grpc.health.v1.Health")};
  for (const Labels& method : methods) {
    EXPECT_EQ(Get(page, "grpc_server_started_total", method), 0)
        << method.at("grpc_method");
    for (const std::string& code : kGoCodeNames) {
      EXPECT_EQ(Get(page, "grpc_server_handled_total", WithCode(method, code)),
                0)
          << method.at("grpc_method") << " " << code;
    }
    EXPECT_EQ(Get(page, "grpc_server_msg_received_total", method), 0);
    EXPECT_EQ(Get(page, "grpc_server_msg_sent_total", method), 0);
  }
  // 8 methods and "unknown", each with every code: nothing else.
  EXPECT_EQ(page.Samples("grpc_server_handled_total").size(),
            (methods.size() + 1) * kGoCodeNames.size());
  EXPECT_EQ(page.Type("grpc_server_handled_total"), "counter");
  EXPECT_EQ(page.Type("grpc_server_handling_seconds"), "histogram");
  EXPECT_EQ(page.Type("entrokv_grpc_message_handling_seconds"), "histogram");
}

TEST_F(GrpcMetricsTest, HistogramBucketsResolveTenMicrosecondsToOneSecond) {
  StartServer();
  const PrometheusText page = Page();
  Labels labels = Method("Decode", "bidi_stream");
  std::vector<double> bounds;
  for (const auto& [l, value] : page.Samples(
           "entrokv_grpc_message_handling_seconds_bucket", labels)) {
    if (l.at("le") != "+Inf") bounds.push_back(std::stod(l.at("le")));
  }
  std::sort(bounds.begin(), bounds.end());
  ASSERT_FALSE(bounds.empty());
  EXPECT_DOUBLE_EQ(bounds.front(), 10e-6);
  EXPECT_DOUBLE_EQ(bounds.back(), 1.0);
  // At most 10 us apart up to 100 us, where entrokv's answers fall.
  for (size_t i = 1; i < bounds.size() && bounds[i] <= 100e-6; ++i) {
    EXPECT_LE(bounds[i] - bounds[i - 1], 10e-6 + 1e-12) << bounds[i];
  }
  EXPECT_OK(page.HistogramCount("grpc_server_handling_seconds", labels));
}

TEST_F(GrpcMetricsTest, CountsCallsMessagesAndCodesPerMethod) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(const std::string a,
                       CreateSessionId(stub_.get(),
                                       WindowConfig(8, ElementType::kF32)));
  ASSERT_OK(CreateSessionId(stub_.get(), WindowConfig(8, ElementType::kF32))
                .status());
  EXPECT_EQ(GetSession(stub_.get(), "no-such-session").status().code(),
            absl::StatusCode::kNotFound);
  {
    // The attach and 5 steps: 6 request messages, 6 answers.
    DecodeStream stream(stub_.get());
    ASSERT_OK(stream.Attach(a));
    WireStepSource source(SmallShape(ElementType::kF32), 1, a);
    for (int i = 0; i < 5; ++i) ASSERT_OK(stream.Step(source.Next()).status());
    ASSERT_OK(stream.Close());
  }
  // A path no service serves: counted as "unknown", not by its name.
  EXPECT_EQ(RawUnaryCall(channel_.get(), "/no.such.Service/Call", "")
                .error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  // The stream's status is counted as it is sent; its interceptor may be
  // deleted just after the client saw it.
  const Labels decode = Method("Decode", "bidi_stream");
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Get(Page(), "grpc_server_handled_total", WithCode(decode, "OK")) !=
             1 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }

  const PrometheusText page = Page();
  const Labels create = Method("CreateSession", "unary");
  const Labels get = Method("GetSession", "unary");
  EXPECT_EQ(Get(page, "grpc_server_started_total", create), 2);
  EXPECT_EQ(Get(page, "grpc_server_handled_total", WithCode(create, "OK")), 2);
  EXPECT_EQ(Get(page, "grpc_server_started_total", get), 1);
  EXPECT_EQ(Get(page, "grpc_server_handled_total", WithCode(get, "NotFound")),
            1);
  EXPECT_EQ(Get(page, "grpc_server_handled_total", WithCode(get, "OK")), 0);
  EXPECT_EQ(Get(page, "grpc_server_started_total", decode), 1);
  EXPECT_EQ(Get(page, "grpc_server_handled_total", WithCode(decode, "OK")), 1);
  EXPECT_EQ(Get(page, "grpc_server_msg_received_total", decode), 6);
  EXPECT_EQ(Get(page, "grpc_server_msg_sent_total", decode), 6);
  // Per message: every answered request; the failed GetSession sent none.
  EXPECT_EQ(Count(page, "entrokv_grpc_message_handling_seconds", decode), 6);
  EXPECT_EQ(Count(page, "entrokv_grpc_message_handling_seconds", create), 2);
  EXPECT_EQ(Count(page, "entrokv_grpc_message_handling_seconds", get), 0);
  // Per call: each status, the failed one too.
  EXPECT_EQ(Count(page, "grpc_server_handling_seconds", get), 1);
  EXPECT_EQ(Count(page, "grpc_server_handling_seconds", decode), 1);
  const Labels unknown = {{"grpc_type", "unknown"},
                          {"grpc_service", "unknown"},
                          {"grpc_method", "unknown"}};
  EXPECT_EQ(Get(page, "grpc_server_handled_total",
                WithCode(unknown, "Unimplemented")),
            1);
  EXPECT_TRUE(page.Samples("grpc_server_started_total",
                           {{"grpc_service", "no.such.Service"}})
                  .empty());
}

TEST_F(GrpcMetricsTest, BuildInfoNamesVersionAndCommit) {
  StartServer();
  const PrometheusText page = Page();
  const auto samples =
      page.Samples("entrokv_build_info", {{"version", ENTROKV_EXPECTED_VERSION}});
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].second, 1);
  EXPECT_FALSE(samples[0].first.at("commit").empty());
  EXPECT_EQ(samples[0].first.count("build_type"), 1u);
  EXPECT_EQ(page.Type("entrokv_build_info"), "gauge");
}

TEST_F(GrpcMetricsTest, ProcessMetricsFollowTheProcess) {
  StartServer();
  const PrometheusText before = Page();
  // Three more open descriptors, counted by the next scrape.
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) fds.push_back(open("/dev/null", O_RDONLY));
  const PrometheusText after = Page();
  for (int fd : fds) close(fd);
  EXPECT_EQ(after.Value("process_open_fds").value_or(0) -
                before.Value("process_open_fds").value_or(0),
            3);
  rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(after.Value("process_max_fds"),
            static_cast<double>(limit.rlim_cur));
  // Resident: more than 1 MiB, at most the peak getrusage reports.
  rusage usage;
  ASSERT_EQ(getrusage(RUSAGE_SELF, &usage), 0);
  const double rss = after.Value("process_resident_memory_bytes").value_or(0);
  EXPECT_GT(rss, 1 << 20);
  EXPECT_LE(rss, usage.ru_maxrss * 1024.0);
  // CPU: between what getrusage counted before and after the scrape (to the
  // page's 0.01 s).
  const double cpu = after.Value("process_cpu_seconds_total").value_or(-1);
  ASSERT_EQ(getrusage(RUSAGE_SELF, &usage), 0);
  const double cpu_now = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 +
                         usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;
  EXPECT_GE(cpu, 0);
  EXPECT_LE(cpu, cpu_now + 0.02);
  // Started when this program did, to a few seconds (boot time and clock
  // ticks are coarse).
  const double start = after.Value("process_start_time_seconds").value_or(0);
  EXPECT_NEAR(start, static_cast<double>(kProgramStart), 3.0);
  for (const char* name :
       {"process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_open_fds",
        "process_start_time_seconds"}) {
    EXPECT_TRUE(after.HasHelp(name)) << name;
  }
  EXPECT_EQ(after.Type("process_cpu_seconds_total"), "counter");
}

TEST(ProcStatTest, CountsFieldsFromTheLastParenthesis) {
  // A command name with a space and a ')' in it; utime 14, stime 15,
  // starttime 22, vsize 23, rss 24 (proc(5)).
  const std::string line =
      "4242 (entro kv) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
      "700 300 0 0 20 0 9 0 123456 987654321 2500 18446744073709551615";
  const std::optional<ProcStat> stat = ParseProcStat(line);
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->utime_ticks, 700);
  EXPECT_EQ(stat->stime_ticks, 300);
  EXPECT_EQ(stat->start_ticks, 123456);
  EXPECT_EQ(stat->vsize_bytes, 987654321);
  EXPECT_EQ(stat->rss_pages, 2500);
  EXPECT_FALSE(ParseProcStat("4242 (short) S 1 2 3").has_value());
  EXPECT_FALSE(ParseProcStat("no parenthesis").has_value());
}

TEST(ProcStatTest, ReadsBootTime) {
  EXPECT_EQ(ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocs 3\n"),
            1700000000);
  EXPECT_FALSE(ParseBootTime("cpu 1 2 3\n").has_value());
}

}  // namespace
}  // namespace entrokv::server::testing
