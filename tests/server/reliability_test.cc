// Reliability of the service against hostile or broken clients: malformed
// messages are answered INVALID_ARGUMENT with a message (never UNIMPLEMENTED
// with none, never a silent OK), work per Decode message is bounded and
// refused before any of it is done, and one stream's worst message cannot
// stall another stream's steps.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kCreateSession[] = "/entrokv.v1.EntroKv/CreateSession";
constexpr char kCloseSession[] = "/entrokv.v1.EntroKv/CloseSession";
constexpr char kGetSession[] = "/entrokv.v1.EntroKv/GetSession";
constexpr char kListSessions[] = "/entrokv.v1.EntroKv/ListSessions";
constexpr char kDecode[] = "/entrokv.v1.EntroKv/Decode";
constexpr char kEcho[] = "/entrokv.v1.EntroKv/Echo";

// Not a protobuf message: field 1's length prefix (16) runs past the end.
const std::string& Truncated() {
  static const std::string* bytes = new std::string(
      "\x0a\x10"
      "abc",
      5);
  return *bytes;
}
// A DecodeRequest whose attach[0] (a proto3 string) is not UTF-8.
const std::string& NotUtf8Attach() {
  static const std::string* bytes = new std::string("\x0a\x02\xff\xfe", 4);
  return *bytes;
}
// `n` empty steps: the 2-byte field `steps {}` repeated.
std::string EmptySteps(int n) {
  std::string out;
  out.reserve(2 * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.append("\x12\x00", 2);
  return out;
}

// ---------------------------------------------------------------------------
// Malformed messages.

class MalformedInputTest : public ServerTest {
 protected:
  std::string Create() {
    absl::StatusOr<std::string> id =
        CreateSessionId(stub_.get(), WindowConfig(8));
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }
};

// gRPC's generated callback handlers answer a request they cannot parse with
// UNIMPLEMENTED and an empty message; the service must say what is wrong.
TEST_F(MalformedInputTest, GarbageUnaryRequestIsInvalidArgumentWithAMessage) {
  StartServer();
  for (const char* method :
       {kCreateSession, kCloseSession, kGetSession, kListSessions}) {
    SCOPED_TRACE(method);
    const grpc::Status status =
        RawUnaryCall(channel_.get(), method, Truncated());
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("Request"));
    EXPECT_THAT(status.error_message(), HasSubstr("parse"));
  }
  // Well-formed raw bytes are served as usual: an empty ListSessionsRequest.
  std::string reply;
  ASSERT_TRUE(RawUnaryCall(channel_.get(), kListSessions, "", &reply).ok());
  v1::ListSessionsResponse listed;
  ASSERT_TRUE(listed.ParseFromString(reply));
  EXPECT_EQ(listed.server().sessions(), 0);
}

// A Decode message that cannot be parsed ends the stream with
// INVALID_ARGUMENT (not a silent OK), and the message says which sessions the
// stream let go of; they are detached at once and attachable elsewhere.
TEST_F(MalformedInputTest, GarbageDecodeMessageEndsStreamAndDetachesVisibly) {
  StartServer();
  const std::string id = Create();
  for (const std::string* garbage : {&Truncated(), &NotUtf8Attach()}) {
    SCOPED_TRACE(garbage->size());
    RawStream stream(channel_.get(), kDecode);
    v1::DecodeRequest attach;
    attach.add_attach(id);
    ASSERT_TRUE(stream.Write(attach));
    std::string bytes;
    ASSERT_TRUE(stream.Read(&bytes));
    v1::DecodeResponse attached;
    ASSERT_TRUE(attached.ParseFromString(bytes));
    ASSERT_EQ(attached.attach_results_size(), 1);
    ASSERT_EQ(attached.attach_results(0).status().code(), 0);

    ASSERT_TRUE(stream.Write(*garbage));
    EXPECT_FALSE(stream.Read(&bytes));
    const grpc::Status status = stream.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("DecodeRequest"));
    EXPECT_THAT(status.error_message(), HasSubstr("detached"));
    EXPECT_THAT(status.error_message(), HasSubstr(id));

    ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
    EXPECT_FALSE(info.attached());
    DecodeStream again(stub_.get());
    EXPECT_OK(again.Attach(id));
    // Half-closed: the server detaches before it answers, so the next
    // iteration can attach the session again at once.
    EXPECT_OK(again.Close());
  }
}

// ---------------------------------------------------------------------------
// Work per message.

class MessageLimitTest : public ServerTest {};

// One step over --max_steps_per_message (default 1024): the stream ends
// RESOURCE_EXHAUSTED naming the flag, and none of the message's steps ran,
// although every one of them was a good step.
TEST_F(MessageLimitTest, OverLongDecodeMessageRunsNoneOfItsSteps) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(const std::string id,
                       CreateSessionId(stub_.get(), WindowConfig(8)));
  {
    DecodeStream stream(stub_.get());
    ASSERT_OK(stream.Attach(id));
    WireStepSource source(SmallShape(ElementType::kF16), 3, id);
    v1::DecodeRequest request;
    for (int i = 0; i < 1025; ++i) *request.add_steps() = source.Next();
    const absl::StatusOr<v1::DecodeResponse> response =
        stream.RoundTrip(request);
    EXPECT_STATUS_CODE(response, absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(response.status().message(),
                HasSubstr("--max_steps_per_message"));
  }
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
  EXPECT_EQ(info.stats().steps(), 0);
  EXPECT_EQ(info.stats().live(), 0);
  EXPECT_FALSE(info.attached());
}

// The limit counts the attach and detach lists as well: 1025 attach (or
// detach) entries end the stream the same way.
TEST_F(MessageLimitTest, OverLongAttachOrDetachListEndsTheStream) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(const std::string id,
                       CreateSessionId(stub_.get(), WindowConfig(8)));
  for (const bool attach : {true, false}) {
    SCOPED_TRACE(attach ? "attach" : "detach");
    DecodeStream stream(stub_.get());
    if (!attach) {
      ASSERT_OK(stream.Attach(id));
    }
    v1::DecodeRequest request;
    auto* list = attach ? request.mutable_attach() : request.mutable_detach();
    list->Add(std::string(id));
    for (int i = 1; i < 1025; ++i) list->Add(absl::StrCat("s-none-", i));
    const absl::StatusOr<v1::DecodeResponse> response =
        stream.RoundTrip(request);
    EXPECT_STATUS_CODE(response, absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(response.status().message(),
                HasSubstr("--max_steps_per_message"));
    EXPECT_THAT(response.status().message(),
                HasSubstr(attach ? "attach: more than" : "detach: more than"));
  }
}

// Peak resident memory of this process (client and server), in bytes.
int64_t PeakRssBytes() {
  FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
  }
  std::fclose(status);
  return int64_t{kib} * 1024;
}

// The tester's message: 2,000,000 empty steps in 4 MB (it took a server from
// 18 MB to 932 MB). Refused as such, before it is parsed into two million
// step objects.
TEST_F(MessageLimitTest, TwoMillionEmptyStepsAreRefusedUnparsed) {
  StartServer();
  const std::string bytes = EmptySteps(2'000'000);
  const int64_t rss_before = PeakRssBytes();
  RawStream stream(channel_.get(), kDecode);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(stream.Write(bytes));
  std::string reply;
  EXPECT_FALSE(stream.Read(&reply));
  const grpc::Status status = stream.Finish();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("--max_steps_per_message"));
  const int64_t rss_growth = PeakRssBytes() - rss_before;
  std::printf(
      "2,000,000 empty steps (%zu bytes) refused in %s; peak RSS grew by "
      "%.1f MB\n",
      bytes.size(), absl::FormatDuration(took).c_str(), rss_growth / 1e6);
  EXPECT_LT(rss_growth, int64_t{256} << 20);
}

// Past --max_steps_per_session_per_message (default 16), every step of that
// session in the message is refused and none runs; the other sessions of the
// message are served as usual, and the stream stays open.
TEST_F(MessageLimitTest, StepsOfOneSessionPastItsLimitAreRefusedTogether) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse a,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(8))));
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse b,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(8))));
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(a.session_id()));
  ASSERT_OK(stream.Attach(b.session_id()));
  WireStepSource a_source(SmallShape(ElementType::kF16), 1, a.session_id());
  WireStepSource b_source(SmallShape(ElementType::kF16), 2, b.session_id());

  v1::DecodeRequest request;
  for (int i = 0; i < 17; ++i) *request.add_steps() = a_source.Next();
  *request.add_steps() = b_source.Next();
  ASSERT_OK_AND_ASSIGN(v1::DecodeResponse response, stream.RoundTrip(request));
  ASSERT_EQ(response.results_size(), 18);
  for (int i = 0; i < 17; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(response.results(i).status().code(),
              static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
    EXPECT_THAT(response.results(i).status().message(),
                HasSubstr(absl::StrCat("steps[", i, "].session_id")));
    EXPECT_THAT(response.results(i).status().message(),
                HasSubstr("--max_steps_per_session_per_message"));
  }
  EXPECT_EQ(response.results(17).status().code(), 0);
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info,
                       GetSession(stub_.get(), a.session_id()));
  EXPECT_EQ(info.stats().steps(), 0);

  // Sixteen steps of one session in one message are within the limit.
  WireStepSource again(SmallShape(ElementType::kF16), 1, a.session_id());
  v1::DecodeRequest sixteen;
  for (int i = 0; i < 16; ++i) *sixteen.add_steps() = again.Next();
  ASSERT_OK_AND_ASSIGN(response, stream.RoundTrip(sixteen));
  ASSERT_EQ(response.results_size(), 16);
  for (const v1::SessionStepResult& result : response.results()) {
    EXPECT_EQ(result.status().code(), 0) << result.status().message();
  }
}

// Past --max_streams open streams, a new stream ends RESOURCE_EXHAUSTED
// naming the flag; once one ends, a new one is served.
TEST_F(MessageLimitTest, StreamsPastMaxStreamsAreRefusedNamingTheFlag) {
  ServerOptions options = TestServerOptions();
  options.max_streams = 2;
  StartServer(options);
  auto first = std::make_unique<DecodeStream>(stub_.get());
  DecodeStream second(stub_.get());
  ASSERT_OK(first->RoundTrip(v1::DecodeRequest()));
  ASSERT_OK(second.RoundTrip(v1::DecodeRequest()));
  {
    DecodeStream third(stub_.get());
    const absl::StatusOr<v1::DecodeResponse> refused =
        third.RoundTrip(v1::DecodeRequest());
    EXPECT_STATUS_CODE(refused, absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(refused.status().message(), HasSubstr("--max_streams"));
  }
  EXPECT_OK(first->Close());
  first.reset();
  bool served = false;
  for (int i = 0; i < 200 && !served; ++i) {
    DecodeStream next(stub_.get());
    served = next.RoundTrip(v1::DecodeRequest()).ok();
    if (!served) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(served);
  EXPECT_LE(server_->open_streams(), 2);
}

// While other streams send the worst messages the limits allow, and messages
// over them, a well-behaved session's every step is answered within 100 ms.
TEST_F(MessageLimitTest, HealthySessionKeepsItsDeadlineUnderTheWorstMessages) {
  StartServer();
  constexpr int kAttackSessions = 64;
  constexpr int kStepsPerMessage = 1024;  // The default limit.
  constexpr int kStepsPerSession = kStepsPerMessage / kAttackSessions;
  constexpr absl::Duration kDeadline = absl::Milliseconds(100);

  // The healthy session.
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse healthy,
      CreateSession(stub_.get(), ToWireConfig(WindowConfig(32))));
  DecodeStream healthy_stream(stub_.get());
  ASSERT_OK(healthy_stream.Attach(healthy.session_id()));
  WireStepSource healthy_source(SmallShape(ElementType::kF16), 1,
                                healthy.session_id());

  // The worst allowed message with real work: 1024 good steps, 16 for each
  // of 64 sessions that one attacking stream holds. Made before the clock
  // starts, so that the attackers spend no time building them.
  DecodeStream heavy_stream(stub_.get());
  std::vector<std::unique_ptr<WireStepSource>> sources;
  {
    v1::DecodeRequest attach;
    for (int s = 0; s < kAttackSessions; ++s) {
      ASSERT_OK_AND_ASSIGN(
          v1::CreateSessionResponse created,
          CreateSession(stub_.get(), ToWireConfig(WindowConfig(32))));
      attach.add_attach(created.session_id());
      sources.push_back(std::make_unique<WireStepSource>(
          SmallShape(ElementType::kF16), 100 + s, created.session_id(),
          /*prefill=*/1));
    }
    ASSERT_OK(heavy_stream.RoundTrip(attach));
  }
  constexpr int kHeavyMessages = 12;
  std::vector<v1::DecodeRequest> heavy(kHeavyMessages);
  for (v1::DecodeRequest& request : heavy) {
    for (int s = 0; s < kAttackSessions; ++s) {
      for (int k = 0; k < kStepsPerSession; ++k) {
        *request.add_steps() = sources[s]->Next();
      }
    }
  }
  // The worst allowed message of cheap work: 1024 attaches, 1024 steps and
  // 1024 detaches of sessions that do not exist.
  v1::DecodeRequest unknown;
  for (int i = 0; i < kStepsPerMessage; ++i) {
    const std::string id = absl::StrCat("no-such-session-", i);
    unknown.add_attach(id);
    unknown.add_steps()->set_session_id(id);
    unknown.add_detach(id);
  }
  // Over the limit: the tester's message, 400,000 empty steps.
  const std::string over = EmptySteps(400'000);

  std::atomic<bool> stop{false};
  std::atomic<int> over_sent{0}, over_refused{0}, heavy_sent{0},
      unknown_sent{0};
  std::vector<std::thread> attackers;
  for (int a = 0; a < 2; ++a) {
    attackers.emplace_back([&] {
      while (!stop.load()) {
        RawStream stream(channel_.get(), kDecode);
        if (!stream.Write(over)) continue;
        std::string reply;
        while (stream.Read(&reply)) {
        }
        ++over_sent;
        const grpc::Status status = stream.Finish();
        if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
            absl::StrContains(status.error_message(),
                              "--max_steps_per_message")) {
          ++over_refused;
        }
      }
    });
  }
  attackers.emplace_back([&] {
    DecodeStream stream(stub_.get());
    for (int i = 0; !stop.load(); ++i) {
      if (i % 2 == 0 && heavy_sent.load() < kHeavyMessages) {
        const absl::StatusOr<v1::DecodeResponse> response =
            heavy_stream.RoundTrip(heavy[heavy_sent.load()]);
        EXPECT_OK(response);
        if (response.ok()) {
          EXPECT_EQ(response->results_size(), kStepsPerMessage);
          for (const v1::SessionStepResult& result : response->results()) {
            EXPECT_EQ(result.status().code(), 0) << result.status().message();
          }
        }
        ++heavy_sent;
      } else {
        EXPECT_OK(stream.RoundTrip(unknown));
        ++unknown_sent;
      }
    }
  });

  std::vector<absl::Duration> latencies;
  const absl::Time end = absl::Now() + absl::Seconds(3);
  while (absl::Now() < end) {
    const v1::SessionStep step = healthy_source.Next();
    const absl::Time start = absl::Now();
    const absl::StatusOr<v1::SessionStepResult> result =
        healthy_stream.Step(step);
    latencies.push_back(absl::Now() - start);
    ASSERT_OK(result);
    absl::SleepFor(absl::Milliseconds(2));
  }
  stop = true;
  for (std::thread& attacker : attackers) attacker.join();

  std::sort(latencies.begin(), latencies.end());
  const absl::Duration p50 = latencies[latencies.size() / 2];
  const absl::Duration p99 = latencies[latencies.size() * 99 / 100];
  const absl::Duration max = latencies.back();
  std::printf(
      "healthy session: %zu steps, p50 %s, p99 %s, max %s; attackers: %d "
      "over-limit messages (%d refused), %d heavy and %d unknown-session "
      "messages at the limit\n",
      latencies.size(), absl::FormatDuration(p50).c_str(),
      absl::FormatDuration(p99).c_str(), absl::FormatDuration(max).c_str(),
      over_sent.load(), over_refused.load(), heavy_sent.load(),
      unknown_sent.load());
  EXPECT_GT(over_sent.load(), 0);
  EXPECT_EQ(over_refused.load(), over_sent.load());
  EXPECT_GT(heavy_sent.load(), 0);
  EXPECT_GT(unknown_sent.load(), 0);
  EXPECT_LT(max, kDeadline);
}

// ---------------------------------------------------------------------------
// Echo: off unless enabled, and bounded.

class EchoLimitTest : public ServerTest {
 protected:
  // Sends one Echo message; the reply's payload size, or the stream's end.
  absl::StatusOr<size_t> EchoOnce(const v1::EchoMessage& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(20));
    auto stream = stub_->Echo(&context);
    v1::EchoMessage reply;
    if (stream->Write(request) && stream->Read(&reply)) {
      stream->WritesDone();
      stream->Finish().IgnoreError();
      return reply.payload().size();
    }
    return ToAbsl(stream->Finish());
  }
};

TEST_F(EchoLimitTest, EchoIsOffUnlessEnabled) {
  StartServer();
  const absl::StatusOr<size_t> refused = EchoOnce(v1::EchoMessage());
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kUnimplemented);
  EXPECT_THAT(refused.status().message(), HasSubstr("--enable_echo"));
}

// --max_echo_bytes (default 1 MiB) bounds the reply a tiny request can ask
// for, and the payload echoed back.
TEST_F(EchoLimitTest, RepliesPastMaxEchoBytesAreRefused) {
  ServerOptions options = TestServerOptions();
  options.enable_echo = true;
  StartServer(options);
  constexpr uint32_t kMax = 1 << 20;
  v1::EchoMessage request;
  request.set_reply_bytes(kMax);
  EXPECT_EQ(EchoOnce(request).value_or(0), kMax);
  request.set_reply_bytes(kMax + 1);
  absl::StatusOr<size_t> refused = EchoOnce(request);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("reply_bytes"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--max_echo_bytes"));

  v1::EchoMessage payload;
  payload.set_payload(std::string(kMax + 1, 'x'));
  refused = EchoOnce(payload);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("--max_echo_bytes"));
}

TEST_F(EchoLimitTest, GarbageEchoMessageIsInvalidArgument) {
  ServerOptions options = TestServerOptions();
  options.enable_echo = true;
  StartServer(options);
  RawStream stream(channel_.get(), kEcho);
  ASSERT_TRUE(stream.Write(Truncated()));
  std::string reply;
  EXPECT_FALSE(stream.Read(&reply));
  const grpc::Status status = stream.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("EchoMessage"));
}

// ---------------------------------------------------------------------------
// The limits' own values.

TEST(ServerLimitOptionsTest, BadLimitsAreRefusedNamingTheOption) {
  struct Case {
    const char* field;
    void (*spoil)(ServerOptions*);
  };
  const Case cases[] = {
      {"max_streams", [](ServerOptions* o) { o->max_streams = -1; }},
      {"max_steps_per_message",
       [](ServerOptions* o) { o->max_steps_per_message = 0; }},
      {"max_steps_per_session_per_message",
       [](ServerOptions* o) { o->max_steps_per_session_per_message = 0; }},
      {"max_echo_bytes", [](ServerOptions* o) { o->max_echo_bytes = -1; }},
      {"grpc_memory_bytes",
       [](ServerOptions* o) {
         o->grpc_memory_bytes = 2 * o->max_message_bytes - 1;
       }},
      {"grpc_max_threads", [](ServerOptions* o) { o->grpc_max_threads = 1; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    ServerOptions options = TestServerOptions();
    c.spoil(&options);
    const absl::StatusOr<std::unique_ptr<Server>> server =
        Server::Start(options);
    EXPECT_STATUS_CODE(server, absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(server.status().message(), HasSubstr(c.field));
  }
}

}  // namespace
}  // namespace entrokv::server::testing
