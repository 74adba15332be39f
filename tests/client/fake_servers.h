// Stand-in servers for the client tests' failure paths: a service that
// answers creation and attaches but never a step, a helper that serves any
// service on a free loopback port, and a DecodeBatch of two sessions on the
// silent service.

#ifndef ENTROKV_TESTS_CLIENT_FAKE_SERVERS_H_
#define ENTROKV_TESTS_CLIENT_FAKE_SERVERS_H_

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "entrokv/client/batch.h"
#include "entrokv/client/client.h"
#include "entrokv/core/config.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "gtest/gtest.h"
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

// Two sessions `a` and `b` of one DecodeBatch, each with `config` and a
// 50 ms step deadline, on a SilentService: every step message misses its
// deadline. Torn down in order: sessions, batch, then the server.
struct SilentBatch {
  // False (with a test failure) when something could not start.
  bool Start(const SessionConfig& config) {
    ClientOptions client_options;
    server = Serve(&service, &client_options.target);
    if (server == nullptr) {
      ADD_FAILURE() << "the silent server did not start";
      return false;
    }
    absl::StatusOr<std::unique_ptr<Client>> connected =
        Client::Connect(client_options);
    if (!connected.ok()) {
      ADD_FAILURE() << connected.status();
      return false;
    }
    client = *std::move(connected);
    batch = client->CreateBatch();
    SessionOptions options;
    options.step_deadline = absl::Milliseconds(50);
    auto made_a = batch->CreateSession(config, options);
    auto made_b = batch->CreateSession(config, options);
    if (!made_a.ok() || !made_b.ok()) {
      ADD_FAILURE() << made_a.status() << " " << made_b.status();
      return false;
    }
    a = *std::move(made_a);
    b = *std::move(made_b);
    return true;
  }
  ~SilentBatch() {
    a.reset();
    b.reset();
    batch.reset();
    if (server != nullptr) server->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  SilentService service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<Client> client;
  std::unique_ptr<DecodeBatch> batch;
  std::unique_ptr<Session> a, b;
};

}  // namespace entrokv::testing

#endif  // ENTROKV_TESTS_CLIENT_FAKE_SERVERS_H_
