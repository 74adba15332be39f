// grpc.reflection.v1 (server/reflection_v1.h), as a tool that speaks only v1
// asks it: the services, the file of a symbol or a name with its
// dependencies, and NOT_FOUND for what does not exist.

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "server_test_util.h"

namespace entrokv::server::testing {
namespace {

using ::grpc::reflection::v1::ServerReflection;
using ::grpc::reflection::v1::ServerReflectionRequest;
using ::grpc::reflection::v1::ServerReflectionResponse;
using ::testing::IsSupersetOf;

class ReflectionV1Test : public ServerTest {
 protected:
  void SetUp() override {
    ServerOptions options = TestServerOptions();
    options.enable_reflection = true;
    StartServer(options);
    reflection_ = ServerReflection::NewStub(channel_);
  }

  // One request on a new stream, its one response.
  ServerReflectionResponse Ask(const ServerReflectionRequest& request) {
    grpc::ClientContext context;
    auto stream = reflection_->ServerReflectionInfo(&context);
    ServerReflectionResponse response;
    EXPECT_TRUE(stream->Write(request));
    EXPECT_TRUE(stream->Read(&response));
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
    return response;
  }

  // The file names of a file_descriptor_response.
  static std::vector<std::string> Files(const ServerReflectionResponse& r) {
    std::vector<std::string> names;
    for (const std::string& bytes :
         r.file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto file;
      EXPECT_TRUE(file.ParseFromString(bytes));
      names.push_back(file.name());
    }
    return names;
  }

  std::unique_ptr<ServerReflection::Stub> reflection_;
};

TEST_F(ReflectionV1Test, ListsTheServices) {
  ServerReflectionRequest request;
  request.set_list_services("");
  const ServerReflectionResponse response = Ask(request);
  std::vector<std::string> names;
  for (const auto& s : response.list_services_response().service()) {
    names.push_back(s.name());
  }
  EXPECT_THAT(names, IsSupersetOf({"entrokv.v1.EntroKv",
                                   "grpc.reflection.v1.ServerReflection",
                                   "grpc.health.v1.Health"}));
  EXPECT_EQ(response.original_request().list_services(), "");
}

TEST_F(ReflectionV1Test, GivesTheFileOfASymbolAndOfAName) {
  ServerReflectionRequest request;
  request.set_file_containing_symbol("entrokv.v1.EntroKv.Decode");
  ServerReflectionResponse response = Ask(request);
  ASSERT_FALSE(response.has_error_response())
      << response.error_response().error_message();
  std::vector<std::string> files = Files(response);
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(files[0], "entrokv/v1/entrokv.proto");
  // Every file named once.
  EXPECT_EQ(std::set<std::string>(files.begin(), files.end()).size(),
            files.size());

  request.set_file_by_filename("entrokv/v1/entrokv.proto");
  response = Ask(request);
  files = Files(response);
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(files[0], "entrokv/v1/entrokv.proto");
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(
      response.file_descriptor_response().file_descriptor_proto(0)));
  std::vector<std::string> services;
  for (const auto& s : file.service()) services.push_back(s.name());
  EXPECT_THAT(services, ::testing::Contains("EntroKv"));
}

TEST_F(ReflectionV1Test, UnknownSymbolsAreNotFound) {
  ServerReflectionRequest request;
  request.set_file_containing_symbol("entrokv.v1.NoSuchThing");
  ServerReflectionResponse response = Ask(request);
  EXPECT_EQ(response.error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
  request.set_file_by_filename("no/such.proto");
  response = Ask(request);
  EXPECT_EQ(response.error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
  request.set_all_extension_numbers_of_type("entrokv.v1.SessionConfig");
  response = Ask(request);
  EXPECT_FALSE(response.has_error_response());
  EXPECT_EQ(response.all_extension_numbers_response().base_type_name(),
            "entrokv.v1.SessionConfig");
}

}  // namespace
}  // namespace entrokv::server::testing
