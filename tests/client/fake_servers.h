// Stand-in servers for the client tests' failure paths: a service that
// answers creation and attaches but never a step, and a helper that serves
// any service on a free loopback port.

#ifndef ENTROKV_TESTS_CLIENT_FAKE_SERVERS_H_
#define ENTROKV_TESTS_CLIENT_FAKE_SERVERS_H_

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace entrokv::testing {

// Answers every attach on `stream` and never a step, until the client ends
// the stream.
inline void AnswerAttachesOnly(
    grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream) {
  v1::DecodeRequest request;
  while (stream->Read(&request)) {
    if (request.attach_size() > 0) {
      v1::DecodeResponse response;
      response.add_attach_results()->set_session_id(request.attach(0));
      stream->Write(response);
    }
  }
}

// Creates sessions named "silent", answers attaches, swallows steps: the
// deadline path, deterministic.
class SilentService final : public v1::EntroKv::Service {
 public:
  grpc::Status CreateSession(grpc::ServerContext*,
                             const v1::CreateSessionRequest*,
                             v1::CreateSessionResponse* response) override {
    response->set_session_id("silent");
    return grpc::Status::OK;
  }
  grpc::Status Decode(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream)
      override {
    AnswerAttachesOnly(stream);  // Steps are swallowed: never answered.
    return grpc::Status::OK;
  }
};

// `service` served on a free loopback port; its target in `target`.
inline std::unique_ptr<grpc::Server> Serve(grpc::Service* service,
                                           std::string* target) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  *target = absl::StrCat("127.0.0.1:", port);
  return server;
}

}  // namespace entrokv::testing

#endif  // ENTROKV_TESTS_CLIENT_FAKE_SERVERS_H_
