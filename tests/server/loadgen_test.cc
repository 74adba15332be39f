// entrokv-loadgen (the binary) against an in-process server: its report
// counts only the server's answers in the latency figures, counts the client
// library's local fallbacks apart, and says so plainly when the server has
// Echo disabled.

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "server_test_util.h"

#ifndef ENTROKV_LOADGEN_BINARY
#error "ENTROKV_LOADGEN_BINARY must name the entrokv-loadgen executable"
#endif

namespace entrokv::server::testing {
namespace {

using ::testing::HasSubstr;

struct LoadgenRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr.
};

LoadgenRun RunLoadgen(const std::vector<std::string>& args) {
  std::vector<std::string> quoted;
  for (const std::string& arg : args) quoted.push_back("'" + arg + "'");
  const std::string command = absl::StrCat("'", ENTROKV_LOADGEN_BINARY, "' ",
                                           absl::StrJoin(quoted, " "), " 2>&1");
  LoadgenRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    run.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// The integer after "\"key\": " in `json` (its first occurrence); 0 when
// absent.
int64_t JsonInt(const std::string& json, const std::string& key) {
  const std::string prefix = absl::StrCat("\"", key, "\": ");
  const size_t at = json.find(prefix);
  if (at == std::string::npos) return 0;
  return std::strtoll(json.c_str() + at + prefix.size(), nullptr, 10);
}

// A small, fast workload.
std::vector<std::string> SmallWorkload(const std::string& target) {
  return {absl::StrCat("--target=", target),
          "--sessions=1",
          "--prefill=0",
          "--rounds=1",
          "--steps_per_round=20",
          "--layers=1",
          "--kv_heads=1",
          "--q_heads=1",
          "--head_dim=8",
          "--budget=4",
          "--policy=window",
          "--progress=false"};
}

// A server that accepts sessions and attaches them but never answers a
// step: every step the client library sends falls back at its deadline.
class SilentService final : public v1::EntroKv::CallbackService {
 public:
  grpc::ServerUnaryReactor* CreateSession(
      grpc::CallbackServerContext* context, const v1::CreateSessionRequest*,
      v1::CreateSessionResponse* response) override {
    response->set_session_id("silent-session");
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const v1::CloseSessionRequest*,
                                         v1::CloseSessionResponse*) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerBidiReactor<v1::DecodeRequest, v1::DecodeResponse>* Decode(
      grpc::CallbackServerContext*) override {
    return new SilentDecode();
  }

 private:
  // Answers attach-only messages; reads steps and answers nothing.
  class SilentDecode final
      : public grpc::ServerBidiReactor<v1::DecodeRequest, v1::DecodeResponse> {
   public:
    SilentDecode() { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      if (request_.steps_size() > 0) {
        StartRead(&request_);
        return;
      }
      response_.Clear();
      for (const std::string& id : request_.attach()) {
        response_.add_attach_results()->set_session_id(id);
      }
      StartWrite(&response_);
    }
    void OnWriteDone(bool ok) override {
      if (ok) {
        StartRead(&request_);
      } else {
        Finish(grpc::Status::CANCELLED);
      }
    }
    void OnDone() override { delete this; }

   private:
    v1::DecodeRequest request_;
    v1::DecodeResponse response_;
  };
};

class LoadgenTest : public ServerTest {};

// Against a server that never answers a step, every step is decided locally
// by the client library: none is a server answer, so the count, the status
// histogram and the latency percentiles are empty, and the report says how
// many steps fell back.
TEST_F(LoadgenTest, FallbackStepsAreNotCountedAsServerAnswers) {
  SilentService silent;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&silent);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::vector<std::string> args =
      SmallWorkload(absl::StrCat("127.0.0.1:", port));
  args.push_back("--client=library");
  args.push_back("--step_deadline=20ms");
  args.push_back("--mode=entrokv");

  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const LoadgenRun json = RunLoadgen(json_args);
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output, HasSubstr("\"count\": 0,"));
  EXPECT_THAT(json.output, HasSubstr("\"fallbacks\": 20,"));
  EXPECT_THAT(json.output, HasSubstr("\"status\": {}"));
  EXPECT_THAT(json.output, HasSubstr("\"latency_us\": {\"p50\": 0.0,"));

  const LoadgenRun text = RunLoadgen(args);
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output,
              HasSubstr("client fallbacks: 20 steps decided locally"));
  server->Shutdown(std::chrono::system_clock::now());
}

// Against the real server with a deadline it cannot always meet, every step
// is either a server answer (in the count and the status histogram) or a
// fallback, never both.
TEST_F(LoadgenTest, EveryStepIsEitherAnAnswerOrAFallback) {
  StartServer();
  std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
  args.push_back("--client=library");
  args.push_back("--step_deadline=1us");
  args.push_back("--mode=entrokv");
  args.push_back("--json");
  const LoadgenRun json = RunLoadgen(args);
  EXPECT_EQ(json.exit_code, 0) << json.output;
  const int64_t count = JsonInt(json.output, "count");
  const int64_t fallbacks = JsonInt(json.output, "fallbacks");
  const int64_t ok = JsonInt(json.output, "OK");
  EXPECT_EQ(count + fallbacks, 20) << json.output;
  EXPECT_EQ(ok, count) << json.output;
}

// Echo is off unless the server runs with --enable_echo: the load generator
// says so and still reports the entrokv mode.
TEST_F(LoadgenTest, SaysWhenTheServerHasEchoDisabled) {
  StartServer();
  std::vector<std::string> args = SmallWorkload(server_->targets()[0]);
  args.push_back("--mode=both");
  const LoadgenRun run = RunLoadgen(args);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--enable_echo"));
  EXPECT_THAT(run.output, HasSubstr("entrokv "));
}

}  // namespace
}  // namespace entrokv::server::testing
