#include "session_setup.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "convert.h"
#include "proto/convert/config_convert.h"
#include "proto/convert/shadow_convert.h"

namespace entrokv::client_internal {

bool IsServerSideFailure(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnimplemented:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<CreatedSession> CreateServerSession(
    const ClientShared& shared, const SessionConfig& config,
    const ShadowRequest& shadowing, std::string_view id, absl::Time deadline) {
  v1::CreateSessionRequest request;
  proto::ToProto(config, request.mutable_config());
  if (!shadowing.empty()) {
    proto::ToProto(shadowing, request.mutable_shadowing());
  }
  request.set_session_id(std::string(id));
  v1::CreateSessionResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  absl::Status status =
      FromGrpc(shared.stub->CreateSession(&context, request, &response));
  if (!status.ok()) return status;
  CreatedSession created{response.session_id(), config};
  if (response.session().has_config()) {
    absl::StatusOr<SessionConfig> read =
        EffectiveConfigFromProto(response.session().config());
    if (!read.ok()) {
      CloseInBackground(shared.stub, created.id, shared.rpc_deadline);
      return read.status();
    }
    created.config = *std::move(read);
  }
  return created;
}

std::unique_ptr<DecodeStream> OpenStream(const ClientShared& shared,
                                         StreamApi api) {
  return api == StreamApi::kSync
             ? OpenSyncDecodeStream(shared.stub.get(), shared.watchdog.get())
             : OpenCallbackDecodeStream(shared.stub.get());
}

absl::Status AttachOn(DecodeStream* stream, const std::string& id,
                      absl::Time deadline) {
  auto attach = std::make_unique<v1::DecodeRequest>();
  attach->add_attach(id);
  stream->Send(std::move(attach), deadline);
  v1::DecodeResponse response;
  absl::Status read = stream->Next(deadline, &response);
  if (!read.ok()) return read;
  if (response.attach_results_size() != 1) {
    return absl::InternalError(absl::StrCat("entrokv: attach answered with ",
                                            response.attach_results_size(),
                                            " results"));
  }
  return FromProto(response.attach_results(0).status());
}

}  // namespace entrokv::client_internal
