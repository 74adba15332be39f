// grpc.health.v1 as the server serves it itself (server/health_service.h),
// checked against the public health protocol: Check and Watch, unknown
// names, bad requests, and what a drain does to watchers on the API port
// and on the health port. Also: the server starts none of gRPC's own
// polling threads (docs/design.md "Threads").

#include <dirent.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

constexpr char kApi[] = "entrokv.v1.EntroKv";

std::chrono::system_clock::time_point In(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(d);
}

// Check of `service`: its status, or the call's error code negated.
int Check(Health::Stub* stub, const std::string& service) {
  grpc::ClientContext context;
  context.set_deadline(In(absl::Seconds(5)));
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return -static_cast<int>(status.error_code());
  return response.status();
}

// One Watch call, read message by message.
class Watch {
 public:
  Watch(Health::Stub* stub, const std::string& service) {
    context_.set_deadline(In(absl::Seconds(30)));
    HealthCheckRequest request;
    request.set_service(service);
    reader_ = stub->Watch(&context_, request);
  }
  ~Watch() {
    if (!finished_) context_.TryCancel();
  }

  // The next status sent, or -1 when the stream ended.
  int Next() {
    HealthCheckResponse response;
    if (!reader_->Read(&response)) return -1;
    return response.status();
  }

  grpc::Status Finish() {
    finished_ = true;
    return reader_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader_;
  bool finished_ = false;
};

class HealthServiceTest : public ServerTest {
 protected:
  std::unique_ptr<Health::Stub> Stub(const std::string& target) {
    return Health::NewStub(
        grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  }
};

TEST_F(HealthServiceTest, CheckAnswersKnownNamesAndNotFoundOtherwise) {
  StartServer();
  auto health = Stub(server_->targets()[0]);
  EXPECT_EQ(Check(health.get(), ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(health.get(), kApi), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(health.get(), "no.such.Service"),
            -static_cast<int>(grpc::StatusCode::NOT_FOUND));
}

TEST_F(HealthServiceTest, AMalformedRequestIsInvalidArgument) {
  StartServer();
  // Field 1, a string of 5 bytes, of which 1 is there.
  const grpc::Status status = RawUnaryCall(
      channel_.get(), "/grpc.health.v1.Health/Check", std::string("\x0a\x05a"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("HealthCheckRequest"));
}

TEST_F(HealthServiceTest, WatchSendsTheStatusAtOnceAndUnknownNamesAsSuch) {
  StartServer();
  auto health = Stub(server_->targets()[0]);
  Watch whole(health.get(), "");
  EXPECT_EQ(whole.Next(), HealthCheckResponse::SERVING);
  Watch unknown(health.get(), "no.such.Service");
  EXPECT_EQ(unknown.Next(), HealthCheckResponse::SERVICE_UNKNOWN);
}

// On the API port a drain sends NOT_SERVING, then ends the watch
// UNAVAILABLE, and an open watch does not hold the drain open: with no
// stream open, Shutdown returns long before its drain deadline.
TEST_F(HealthServiceTest, ADrainEndsTheApiPortsWatchesAfterNotServing) {
  StartServer();
  auto health = Stub(server_->targets()[0]);
  Watch watch(health.get(), kApi);
  ASSERT_EQ(watch.Next(), HealthCheckResponse::SERVING);
  const absl::Time start = absl::Now();
  std::thread drain([&] { server_->Shutdown(absl::Seconds(20)); });
  EXPECT_EQ(watch.Next(), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(watch.Next(), -1);
  EXPECT_EQ(watch.Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  drain.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// Watches that their clients cancel end on the server: the shutdown that
// follows waits for no call (it would wait for a watch left behind).
TEST_F(HealthServiceTest, WatchesTheirClientsCancelEnd) {
  StartServer();
  auto health = Stub(server_->targets()[0]);
  for (int i = 0; i < 20; ++i) {
    Watch watch(health.get(), i % 2 == 0 ? "" : "no.such.Service");
    ASSERT_GE(watch.Next(), 0);
  }  // Each cancelled as it goes.
  const absl::Time start = absl::Now();
  server_->Shutdown(absl::Seconds(20));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// The health port keeps answering through a drain: a watcher there sees
// NOT_SERVING and stays until the drain is over; a Check says NOT_SERVING.
TEST_F(HealthServiceTest, TheHealthPortsWatchSeesNotServingThroughTheDrain) {
  ServerOptions options = TestServerOptions();
  options.health_listen = "127.0.0.1:0";
  StartServer(options);
  auto health = Stub(server_->health_target());
  Watch watch(health.get(), "");
  ASSERT_EQ(watch.Next(), HealthCheckResponse::SERVING);
  // A Decode stream holds the drain open until its deadline.
  DecodeStream stream(stub_.get());
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), ToWireConfig(WindowConfig(4))));
  ASSERT_OK(stream.Attach(created.session_id()));
  std::thread drain([&] { server_->Shutdown(absl::Seconds(2)); });
  EXPECT_EQ(watch.Next(), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(health.get(), ""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(health.get(), kApi), HealthCheckResponse::NOT_SERVING);
  // Nothing more until the health server goes, at the drain's end.
  EXPECT_EQ(watch.Next(), -1);
  drain.join();
}

// Thread names of this process, from /proc/self/task/*/comm.
std::vector<std::string> ThreadNames() {
  std::vector<std::string> names;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(absl::StrCat("/proc/self/task/", entry->d_name, "/comm"));
    std::string name;
    std::getline(comm, name);
    names.push_back(name);
  }
  closedir(dir);
  return names;
}

// gRPC's callback services poll on threads it names "nexting_thread", and
// its sync services on "grpcpp_sync_ser"...: with either, those threads
// take the streams' events from the server's pollers. The server, serving
// every method with health and a health port, starts neither.
TEST_F(HealthServiceTest, TheServerStartsNoneOfGrpcsOwnPollingThreads) {
  ServerOptions options = TestServerOptions();
  options.health_listen = "127.0.0.1:0";
  StartServer(options);
  auto health = Stub(server_->targets()[0]);
  EXPECT_EQ(Check(health.get(), ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(Stub(server_->health_target()).get(), ""),
            HealthCheckResponse::SERVING);
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), ToWireConfig(WindowConfig(4))));
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(created.session_id()));
  for (const std::string& name : ThreadNames()) {
    EXPECT_THAT(name, ::testing::Not(HasSubstr("nexting")));
    EXPECT_THAT(name, ::testing::Not(HasSubstr("sync_ser")));
  }
}

}  // namespace
}  // namespace entrokv::server::testing
