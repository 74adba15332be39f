// Many sessions at once (no cross-talk), the Echo baseline, shutdown with
// streams open, and the entrokv-server binary's flags and SIGTERM drain.

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

SessionConfig ConfigForSession(int s) {
  SessionConfig config;
  config.shape =
      SmallShape(s % 2 == 0 ? ElementType::kF16 : ElementType::kBf16);
  config.budget = 8 + s % 5;
  config.ranking = kAllRankings[s % std::size(kAllRankings)];
  config.budget_control = kAllBudgetControls[(s / 7) % 2];
  config.seed = s;
  config.placement = Placement::kCpu;
  return config;
}

std::string UniqueSocketPath(const std::string& tag) {
  return absl::StrCat("/tmp/entrokv-test-", getpid(), "-", tag, ".sock");
}

class ConcurrencyTest : public ServerTest {
 protected:
  void SixtyFourSessions(int poll_threads);
};

// 64 sessions, each on its own stream and thread, every one with its own
// policy and stream (overlapping slot ids included); every answer must equal
// that session's in-process reference.
TEST_F(ConcurrencyTest, SixtyFourSessionsWithoutCrossTalk) {
  SixtyFourSessions(1);
}

// The same with the streams spread over three poller threads.
TEST_F(ConcurrencyTest, SixtyFourSessionsOnThreePollers) {
  SixtyFourSessions(3);
}

void ConcurrencyTest::SixtyFourSessions(int poll_threads) {
  ServerOptions options = TestServerOptions();
  options.poll_threads = poll_threads;
  const std::string socket = UniqueSocketPath("concurrency");
  options.listen = {absl::StrCat("unix:", socket)};
  StartServer(options);
  constexpr int kSessions = 64;
  constexpr int kSteps = 40;
  std::atomic<int> mismatches{0};
  std::atomic<int> failures{0};
  std::atomic<int64_t> evictions{0};
  std::vector<std::thread> threads;
  for (int s = 0; s < kSessions; ++s) {
    threads.emplace_back([&, s] {
      const SessionConfig config = ConfigForSession(s);
      auto backend = CreateBackend(BackendKind::kCpu);
      if (!backend.ok()) {
        ++failures;
        return;
      }
      auto reference = (*backend)->CreateSession(config, SessionLimits{});
      auto created = CreateSession(stub_.get(), ToWireConfig(config));
      if (!reference.ok() || !created.ok()) {
        ++failures;
        return;
      }
      const std::string id = created->session_id();
      DecodeStream stream(stub_.get());
      if (!stream.Attach(id).ok()) {
        ++failures;
        return;
      }
      // All sessions use the same slot ids: the engine's ids are per session.
      WireStepSource source(config.shape, 1000 + s, id, /*prefill=*/8,
                            /*first_slot=*/1, /*pin_every=*/11,
                            /*logits_every=*/0);
      for (int t = 0; t < kSteps; ++t) {
        const v1::SessionStep step = source.Next();
        CoreStep core_step = ToCoreStep(step);
        StepResult expected;
        if (!(*reference)->Step(core_step.input, &expected).ok()) {
          ++failures;
          return;
        }
        auto got = stream.Step(step);
        if (!got.ok()) {
          ++failures;
          return;
        }
        const std::vector<uint64_t> evicted(got->evicted().begin(),
                                            got->evicted().end());
        if (evicted != expected.evicted || got->live() != expected.live ||
            got->budget() != expected.budget || got->session_id() != id) {
          ++mismatches;
        }
        evictions += got->evicted_size();
      }
      if (!stream.Close().ok()) ++failures;
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(evictions.load(), 0);
  ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse list,
                       ListSessions(stub_.get()));
  EXPECT_EQ(list.sessions_size(), kSessions);
  for (const v1::SessionInfo& info : list.sessions()) {
    EXPECT_EQ(info.stats().steps(), kSteps);
    EXPECT_FALSE(info.attached());
  }
  unlink(socket.c_str());
}

class EchoTest : public ServerTest {};

ServerOptions EchoOptions() {
  ServerOptions options = TestServerOptions();
  options.enable_echo = true;
  options.max_echo_bytes = 0;  // Up to the max message size.
  return options;
}

TEST_F(EchoTest, EchoesPayloadOrRepliesWithRequestedSize) {
  StartServer(EchoOptions());
  grpc::ClientContext context;
  auto stream = stub_->Echo(&context);
  v1::EchoMessage request;
  request.set_payload(std::string(4096, 'k'));
  v1::EchoMessage reply;
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.payload(), request.payload());
  request.set_reply_bytes(100);
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.payload(), std::string(100, '\0'));
  request.set_reply_bytes(1u << 30);  // Over the max message size.
  ASSERT_TRUE(stream->Write(request));
  EXPECT_FALSE(stream->Read(&reply));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("reply_bytes"));
}

// A reply as large as the max message size cannot be sent with its framing:
// it is refused with INVALID_ARGUMENT (not left to fail in the transport),
// and the largest reply the server promises goes through.
TEST_F(EchoTest, ReplyThatCannotFitTheSendLimitIsInvalidArgument) {
  ServerOptions options = EchoOptions();
  constexpr int64_t kMax = 64 << 10;
  options.max_message_bytes = kMax;
  StartServer(options);
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    auto stream = stub_->Echo(&context);
    v1::EchoMessage request;
    request.set_reply_bytes(kMax - 64);
    v1::EchoMessage reply;
    ASSERT_TRUE(stream->Write(request));
    ASSERT_TRUE(stream->Read(&reply));
    EXPECT_EQ(reply.payload().size(), static_cast<size_t>(kMax - 64));
    EXPECT_TRUE(stream->WritesDone());
    EXPECT_TRUE(stream->Finish().ok());
  }
  for (const int64_t bytes : {kMax, kMax - 63}) {
    SCOPED_TRACE(bytes);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    auto stream = stub_->Echo(&context);
    v1::EchoMessage request;
    request.set_reply_bytes(static_cast<uint32_t>(bytes));
    v1::EchoMessage reply;
    ASSERT_TRUE(stream->Write(request));
    EXPECT_FALSE(stream->Read(&reply));
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("reply_bytes"));
  }
}

// grpc.health.v1.Health/Check for the whole server, by hand (Debian ships no
// generated health stub): the response is field 1, the status enum.
int HealthStatus(grpc::Channel* channel) {
  grpc::GenericStub stub(channel->shared_from_this());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(2));
  grpc::ByteBuffer request;  // HealthCheckRequest{service: ""}: empty.
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response,
                 [&done](grpc::Status status) { done.set_value(status); });
  const grpc::Status status = done.get_future().get();
  if (!status.ok()) return -static_cast<int>(status.error_code());
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -100;
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  if (bytes.size() == 2 && bytes[0] == 0x08) return bytes[1];
  return 0;  // UNKNOWN (absent field).
}

class ShutdownTest : public ServerTest {};

TEST_F(ShutdownTest, DrainsOpenStreamsThenCancelsThem) {
  StartServer();
  EXPECT_EQ(HealthStatus(channel_.get()), 1);  // SERVING
  SessionConfig config;
  config.shape = SmallShape();
  config.budget = 8;
  config.placement = Placement::kCpu;
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), ToWireConfig(config)));
  const std::string id = created.session_id();
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(id));
  WireStepSource source(config.shape, 1, id);
  ASSERT_OK(stream.Step(source.Next()));

  const absl::Duration drain = absl::Milliseconds(800);
  const absl::Time start = absl::Now();
  std::thread stopper([&] { server_->Shutdown(drain); });
  absl::SleepFor(absl::Milliseconds(150));
  // Draining: the open stream still works.
  EXPECT_OK(stream.Step(source.Next()));
  EXPECT_OK(stream.Step(source.Next()));
  // But no new call is accepted.
  EXPECT_FALSE(CreateSession(stub_.get(), ToWireConfig(config)).ok());
  stopper.join();
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, drain - absl::Milliseconds(50));
  EXPECT_LT(took, drain + absl::Seconds(5));
  // Past the drain deadline, the stream was ended by the server.
  EXPECT_FALSE(stream.Step(source.Next()).ok());
}

TEST_F(ShutdownTest, ShutdownWithManyIdleStreamsReturnsPromptly) {
  StartServer();
  std::vector<std::unique_ptr<DecodeStream>> streams;
  for (int i = 0; i < 16; ++i) {
    SessionConfig config;
    config.shape = SmallShape();
    config.placement = Placement::kCpu;
    ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                         CreateSession(stub_.get(), ToWireConfig(config)));
    streams.push_back(std::make_unique<DecodeStream>(stub_.get()));
    ASSERT_OK(streams.back()->Attach(created.session_id()));
  }
  const absl::Time start = absl::Now();
  server_->Shutdown(absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (auto& stream : streams) {
    EXPECT_FALSE(stream->Attach("x").ok());
  }
}

// ---------------------------------------------------------------------------
// The binary.

#ifdef ENTROKV_SERVER_BINARY

// Runs the binary with `args`; returns its pid. stdout/stderr go to `log`.
pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* out = std::freopen(log.c_str(), "w", stdout);
    (void)out;
    dup2(fileno(stdout), fileno(stderr));
    std::vector<char*> argv;
    std::string binary = ENTROKV_SERVER_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (std::string& arg : copy) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

int WaitExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

std::string ReadFile(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) {
      out.append(buffer, n);
    }
    std::fclose(f);
  }
  return out;
}

TEST(ServerBinaryTest, HelpListsTheFlags) {
  const std::string log = UniqueSocketPath("help") + ".log";
  const pid_t pid = Spawn({"--help"}, log);
  WaitExit(pid, absl::Seconds(20));
  const std::string text = ReadFile(log);
  for (const char* flag :
       {"--listen", "--max_sessions", "--max_live_entries", "--max_bytes",
        "--max_gpu_bytes", "--max_message_bytes", "--max_streams",
        "--max_steps_per_message", "--max_steps_per_session_per_message",
        "--enable_echo", "--max_echo_bytes", "--grpc_memory_bytes",
        "--grpc_max_threads", "--idle_timeout", "--drain_timeout",
        "--log_level"}) {
    EXPECT_THAT(text, HasSubstr(flag));
  }
  unlink(log.c_str());
}

// A listen address that cannot be used ends the binary with a message naming
// --listen, never a crash: exit code 1 for a valid address this machine
// cannot bind, 2 for one the server refuses on its face (a bad command
// line).
TEST(ServerBinaryTest, UnusableListenAddressExitsNamingListen) {
  // 192.0.2.1 is TEST-NET-1, on no interface here. Without
  // --allow_insecure_tcp the server refuses it before trying (plaintext TCP
  // off loopback).
  for (const auto& [address, insecure, code] :
       {std::tuple{"192.0.2.1:1", true, 1}, std::tuple{"192.0.2.1:1", false, 2},
        std::tuple{"127.0.0.1:99999", false, 2}}) {
    SCOPED_TRACE(
        absl::StrCat(address, insecure ? " --allow_insecure_tcp" : ""));
    const std::string log = UniqueSocketPath("badlisten") + ".log";
    const pid_t pid = Spawn({absl::StrCat("--listen=", address), "--gpu=false",
                             absl::StrCat("--allow_insecure_tcp=", insecure)},
                            log);
    EXPECT_EQ(WaitExit(pid, absl::Seconds(20)), code);
    EXPECT_THAT(ReadFile(log), HasSubstr("listen"));
    unlink(log.c_str());
  }
}

TEST(ServerBinaryTest, SigtermDrainsAndExitsZero) {
  const std::string socket = UniqueSocketPath("binary");
  const std::string log = socket + ".log";
  const pid_t pid = Spawn({absl::StrCat("--listen=unix:", socket),
                           "--drain_timeout=300ms", "--gpu=false"},
                          log);
  auto channel = grpc::CreateChannel(absl::StrCat("unix:", socket),
                                     grpc::InsecureChannelCredentials());
  ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                        std::chrono::seconds(20)));
  auto stub = v1::EntroKv::NewStub(channel);
  SessionConfig config;
  config.shape = SmallShape();
  config.placement = Placement::kCpu;
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub.get(), ToWireConfig(config)));
  DecodeStream stream(stub.get());
  ASSERT_OK(stream.Attach(created.session_id()));  // Open while terminated.
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitExit(pid, absl::Seconds(20)), 0);
  const std::string text = ReadFile(log);
  EXPECT_THAT(text, HasSubstr("SIGTERM"));
  EXPECT_THAT(text, HasSubstr("session"));
  unlink(socket.c_str());
  unlink(log.c_str());
}

#endif  // ENTROKV_SERVER_BINARY

}  // namespace
}  // namespace entrokv::server::testing
