// The raw-transport driver (--client=sync): one session per thread over the
// generated stubs and one blocking Decode stream, without the client
// library, to measure the transport alone. It numbers the steps itself and
// sends them as the library would, over the library's channel; its streams
// are bounded by --sync_timeout (sync_stream.h).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "entrokv/core/config.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "proto/convert/config_convert.h"
#include "runner.h"
#include "session_runner.h"
#include "sync_stream.h"
#include "workload.h"

namespace entrokv::loadgen {
namespace {

// Deadline of the unary calls, CreateSession and CloseSession.
constexpr auto kUnaryDeadline = std::chrono::seconds(10);

// The session as the client library would create it, placed on the CPU
// when a GPU placement cannot be had.
v1::CreateSessionRequest CreateRequest(const SessionConfig& config) {
  v1::CreateSessionRequest request;
  proto::ToProto(config, request.mutable_config());
  request.mutable_config()->set_placement_fallback(true);
  return request;
}

class SyncSessionRunner final : public SessionRunner {
 public:
  using SessionRunner::SessionRunner;

  void TearDown() override {
    // A stream that broke was counted when it broke: only its close
    // matters here.
    if (echo() != nullptr) (void)echo()->Close();
    if (decode_ != nullptr) (void)decode_->Close();
    if (id_.empty()) return;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kUnaryDeadline);
    v1::CloseSessionRequest request;
    request.set_session_id(id_);
    v1::CloseSessionResponse response;
    const grpc::Status status =
        shared()->stub->CloseSession(&context, request, &response);
    if (!status.ok()) shared()->CloseFailed(ToAbsl(status));
  }

 private:
  absl::StatusOr<std::string> Open() override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kUnaryDeadline);
    v1::CreateSessionResponse response;
    grpc::Status status = shared()->stub->CreateSession(
        &context, CreateRequest(shared()->options.config), &response);
    if (!status.ok()) return ToAbsl(status);
    id_ = response.session_id();
    decode_ = std::make_unique<DecodeStream>(
        [&](grpc::ClientContext* c) { return shared()->stub->Decode(c); },
        shared()->options.sync_timeout);
    v1::DecodeRequest attach;
    attach.add_attach(id_);
    v1::DecodeResponse reply;
    if (!decode_->RoundTrip(attach, &reply)) {
      return Prefixed("Decode attach: ", decode_->status());
    }
    if (reply.attach_results_size() != 1) {
      return absl::InternalError("Decode attach: no attach result");
    }
    if (reply.attach_results(0).status().code() != 0) {
      return absl::FailedPreconditionError(
          reply.attach_results(0).status().message());
    }
    return id_;
  }

  StepAnswer SendDecode(uint64_t first_slot, int count, const std::string& keys,
                        const std::string& query, double entropy,
                        ModeStats* stats) override {
    StepAnswer answer;
    request_.Clear();
    FillStep(id_, step_++, first_slot, count, keys, query, entropy,
             request_.add_steps());
    if (!decode_->RoundTrip(request_, &response_)) {
      answer.status = Prefixed("Decode: ", decode_->status());
      return answer;
    }
    if (stats != nullptr) {
      stats->bytes_sent += static_cast<int64_t>(request_.ByteSizeLong());
      stats->bytes_received += static_cast<int64_t>(response_.ByteSizeLong());
    }
    if (response_.results_size() != 1) {
      --step_;
      answer.status = absl::InternalError(absl::StrCat(
          "Decode: expected one step result, got ", response_.results_size()));
      return answer;
    }
    const v1::SessionStepResult& result = response_.results(0);
    if (result.status().code() != 0) {
      --step_;  // The session is unchanged; the number is free again.
      answer.status =
          absl::Status(static_cast<absl::StatusCode>(result.status().code()),
                       result.status().message());
      return answer;
    }
    if (stats != nullptr) {
      stats->evicted += result.evicted_size();
      stats->server_ns.push_back(result.compute_ns());
    }
    return answer;
  }

  const absl::Status* DecodeEnded() const override {
    return decode_ != nullptr && decode_->ended() ? &decode_->status()
                                                  : nullptr;
  }
  uint64_t next_step() const override { return step_; }

  std::string id_;  // Empty until CreateSession succeeded.
  uint64_t step_ = 0;
  std::unique_ptr<DecodeStream> decode_;
  v1::DecodeRequest request_;
  v1::DecodeResponse response_;
};

}  // namespace

std::unique_ptr<Runner> CreateSyncRunner(Shared* shared, SessionData data) {
  return std::make_unique<SyncSessionRunner>(shared, std::move(data));
}

}  // namespace entrokv::loadgen
