#include "server/reflection_v1.h"

#include <set>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"

namespace entrokv::server {
namespace {

using ::google::protobuf::DescriptorPool;
using ::google::protobuf::FileDescriptor;
using ::grpc::reflection::v1::ServerReflectionRequest;
using ::grpc::reflection::v1::ServerReflectionResponse;

void Error(grpc::StatusCode code, const std::string& message,
           ServerReflectionResponse* response) {
  response->mutable_error_response()->set_error_code(code);
  response->mutable_error_response()->set_error_message(message);
}

// `file` and every file it depends on, each once, as serialized
// FileDescriptorProtos (a client needs the dependencies to use it).
void AddFiles(const FileDescriptor* file, std::set<std::string>* seen,
              ServerReflectionResponse* response) {
  if (!seen->insert(file->name()).second) return;
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(response->mutable_file_descriptor_response()
                              ->add_file_descriptor_proto());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFiles(file->dependency(i), seen, response);
  }
}

void Answer(const std::vector<std::string>& services,
            const ServerReflectionRequest& request,
            ServerReflectionResponse* response) {
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  std::set<std::string> seen;
  auto file_or_error = [&](const FileDescriptor* file,
                           const std::string& what) {
    if (file == nullptr) {
      Error(grpc::StatusCode::NOT_FOUND, what + " not found", response);
    } else {
      AddFiles(file, &seen, response);
    }
  };
  switch (request.message_request_case()) {
    case ServerReflectionRequest::kFileByFilename:
      file_or_error(pool->FindFileByName(request.file_by_filename()),
                    "file " + request.file_by_filename());
      break;
    case ServerReflectionRequest::kFileContainingSymbol:
      file_or_error(
          pool->FindFileContainingSymbol(request.file_containing_symbol()),
          "symbol " + request.file_containing_symbol());
      break;
    case ServerReflectionRequest::kFileContainingExtension: {
      const auto& ext = request.file_containing_extension();
      const auto* type = pool->FindMessageTypeByName(ext.containing_type());
      const auto* field =
          type == nullptr ? nullptr
                          : pool->FindExtensionByNumber(type,
                                                        ext.extension_number());
      file_or_error(field == nullptr ? nullptr : field->file(),
                    "extension " + std::to_string(ext.extension_number()) +
                        " of " + ext.containing_type());
      break;
    }
    case ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const auto* type =
          pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        Error(grpc::StatusCode::NOT_FOUND,
              "type " + request.all_extension_numbers_of_type() + " not found",
              response);
        break;
      }
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      auto* numbers = response->mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const auto* e : extensions) numbers->add_extension_number(e->number());
      break;
    }
    case ServerReflectionRequest::kListServices:
      for (const std::string& name : services) {
        response->mutable_list_services_response()->add_service()->set_name(
            name);
      }
      break;
    case ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      Error(grpc::StatusCode::UNIMPLEMENTED, "an empty request", response);
      break;
  }
}

}  // namespace

grpc::Status ReflectionV1Service::ServerReflectionInfo(
    grpc::ServerContext*,
    grpc::ServerReaderWriter<ServerReflectionResponse, ServerReflectionRequest>*
        stream) {
  ServerReflectionRequest request;
  while (stream->Read(&request)) {
    ServerReflectionResponse response;
    response.set_valid_host(request.host());
    *response.mutable_original_request() = request;
    Answer(services_, request, &response);
    if (!stream->Write(response)) break;
  }
  return grpc::Status::OK;
}

}  // namespace entrokv::server
