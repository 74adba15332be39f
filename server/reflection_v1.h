// grpc.reflection.v1.ServerReflection over this process's generated
// descriptors (proto/grpc/reflection/v1/reflection.proto): what tools that
// speak only v1 (grpcurl, Postman, newer grpc_cli) ask, answered as gRPC's
// own v1alpha service answers. Served with --enable_reflection.
//
// Thread-safety: thread-safe (each stream is handled on its own).

#ifndef ENTROKV_SERVER_REFLECTION_V1_H_
#define ENTROKV_SERVER_REFLECTION_V1_H_

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace entrokv::server {

class ReflectionV1Service final
    : public grpc::reflection::v1::ServerReflection::Service {
 public:
  // `services`: the full names list_services answers.
  explicit ReflectionV1Service(std::vector<std::string> services)
      : services_(std::move(services)) {}

  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                               grpc::reflection::v1::ServerReflectionRequest>*
          stream) override;

 private:
  const std::vector<std::string> services_;
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_REFLECTION_V1_H_
