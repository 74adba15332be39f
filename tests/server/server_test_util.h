// Helpers for the server tests: an in-process entrokv server on a free port,
// a blocking Decode stream over the generated stub, and builders that turn
// core's synthetic stream into wire steps (and the same steps into core
// StepInputs, for in-process reference sessions).
//
// Not thread-safe: one DecodeStream per thread; the fixture's stub may be
// shared (gRPC stubs are thread-safe).

#ifndef ENTROKV_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define ENTROKV_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"
#include "entrokv/core/synthetic.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/impl/codegen/sync_stream.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace entrokv::server::testing {

inline absl::Status ToAbsl(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}
inline absl::Status ToAbsl(const v1::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.code()),
                      status.message());
}

// Options for a test server: a free loopback port, CPU only.
inline ServerOptions TestServerOptions() {
  ServerOptions options;
  options.listen = {"127.0.0.1:0"};
  options.use_gpu = false;
  options.max_bytes = int64_t{1} << 30;
  return options;
}

// A blocking Decode stream: one request written, one response read.
class DecodeStream {
 public:
  explicit DecodeStream(v1::EntroKv::Stub* stub)
      : stream_(stub->Decode(&context_)) {}
  ~DecodeStream() {
    if (!finished_) {
      context_.TryCancel();
      stream_->Finish().IgnoreError();
    }
  }

  // Writes `request` and reads its response. When the stream has ended,
  // returns the stream's final status (UNAVAILABLE if that was OK).
  absl::StatusOr<v1::DecodeResponse> RoundTrip(
      const v1::DecodeRequest& request) {
    v1::DecodeResponse response;
    if (!finished_ && stream_->Write(request) && stream_->Read(&response)) {
      return response;
    }
    const absl::Status status = EndStatus();
    if (status.ok()) return absl::UnavailableError("stream ended");
    return status;
  }

  // Attaches one session; its attach result.
  absl::Status Attach(const std::string& session_id) {
    v1::DecodeRequest request;
    request.add_attach(session_id);
    absl::StatusOr<v1::DecodeResponse> response = RoundTrip(request);
    if (!response.ok()) return response.status();
    if (response->attach_results_size() != 1) {
      return absl::InternalError("attach: expected one attach result");
    }
    return ToAbsl(response->attach_results(0).status());
  }

  // Runs one step; its result, or the step's status when it failed.
  absl::StatusOr<v1::SessionStepResult> Step(const v1::SessionStep& step) {
    v1::DecodeRequest request;
    *request.add_steps() = step;
    absl::StatusOr<v1::DecodeResponse> response = RoundTrip(request);
    if (!response.ok()) return response.status();
    if (response->results_size() != 1) {
      return absl::InternalError("step: expected one result");
    }
    const v1::SessionStepResult& result = response->results(0);
    if (result.status().code() != 0) return ToAbsl(result.status());
    return result;
  }

  // Breaks the stream as a crashed client would.
  void Cancel() { context_.TryCancel(); }

  // The stream's own operations, for messages in flight together.
  bool Write(const v1::DecodeRequest& request) {
    return stream_->Write(request);
  }
  bool Read(v1::DecodeResponse* response) { return stream_->Read(response); }
  bool WritesDone() { return stream_->WritesDone(); }
  absl::Status Finish() { return EndStatus(); }  // After WritesDone().

  // Half-closes and returns the server's final status.
  absl::Status Close() {
    if (finished_) return final_status_;
    stream_->WritesDone();
    return EndStatus();
  }

 private:
  absl::Status EndStatus() {
    if (!finished_) {
      finished_ = true;
      final_status_ = ToAbsl(stream_->Finish());
    }
    return final_status_;
  }

  grpc::ClientContext context_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::DecodeRequest, v1::DecodeResponse>>
      stream_;
  bool finished_ = false;
  absl::Status final_status_;
};

// Raw bytes <-> grpc::ByteBuffer, for messages the generated stub cannot
// write (malformed ones).
inline grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}
inline std::string FromByteBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

// A unary call of `method` ("/entrokv.v1.EntroKv/CreateSession") with
// `request` as its raw request bytes; the reply's bytes go to `reply`.
inline grpc::Status RawUnaryCall(grpc::Channel* channel, const char* method,
                                 const std::string& request,
                                 std::string* reply = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(20));
  grpc::ByteBuffer response;
  const grpc::Status status =
      grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
          channel,
          grpc::internal::RpcMethod(method,
                                    grpc::internal::RpcMethod::NORMAL_RPC),
          &context, ToByteBuffer(request), &response);
  if (reply != nullptr) *reply = FromByteBuffer(response);
  return status;
}

// A bidi stream of `method` ("/entrokv.v1.EntroKv/Decode") carrying raw
// bytes.
class RawStream {
 public:
  RawStream(grpc::Channel* channel, const char* method)
      : stream_(
            grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer,
                                                      grpc::ByteBuffer>::
                Create(channel,
                       grpc::internal::RpcMethod(
                           method, grpc::internal::RpcMethod::BIDI_STREAMING),
                       &context_)) {}
  ~RawStream() {
    if (!finished_) {
      context_.TryCancel();
      stream_->Finish().IgnoreError();
    }
  }

  bool Write(const std::string& bytes) {
    return stream_->Write(ToByteBuffer(bytes));
  }
  bool Write(const google::protobuf::MessageLite& message) {
    return Write(message.SerializeAsString());
  }
  bool Read(std::string* bytes) {
    grpc::ByteBuffer buffer;
    if (!stream_->Read(&buffer)) return false;
    *bytes = FromByteBuffer(buffer);
    return true;
  }
  // The stream's final status (after the server ended it, or a half-close).
  grpc::Status Finish() {
    if (!finished_) {
      finished_ = true;
      final_status_ = stream_->Finish();
    }
    return final_status_;
  }
  void WritesDone() { stream_->WritesDone(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
      stream_;
  bool finished_ = false;
  grpc::Status final_status_;
};

// Unary helpers.
inline absl::StatusOr<v1::CreateSessionResponse> CreateSession(
    v1::EntroKv::Stub* stub, const v1::SessionConfig& config,
    const std::string& session_id = "") {
  grpc::ClientContext context;
  v1::CreateSessionRequest request;
  *request.mutable_config() = config;
  request.set_session_id(session_id);
  v1::CreateSessionResponse response;
  grpc::Status status = stub->CreateSession(&context, request, &response);
  if (!status.ok()) return ToAbsl(status);
  return response;
}

inline absl::StatusOr<v1::SessionInfo> GetSession(v1::EntroKv::Stub* stub,
                                                  const std::string& id) {
  grpc::ClientContext context;
  v1::GetSessionRequest request;
  request.set_session_id(id);
  v1::GetSessionResponse response;
  grpc::Status status = stub->GetSession(&context, request, &response);
  if (!status.ok()) return ToAbsl(status);
  return response.session();
}

inline absl::StatusOr<v1::SessionInfo> CloseSession(v1::EntroKv::Stub* stub,
                                                    const std::string& id) {
  grpc::ClientContext context;
  v1::CloseSessionRequest request;
  request.set_session_id(id);
  v1::CloseSessionResponse response;
  grpc::Status status = stub->CloseSession(&context, request, &response);
  if (!status.ok()) return ToAbsl(status);
  return response.session();
}

inline absl::StatusOr<v1::ListSessionsResponse> ListSessions(
    v1::EntroKv::Stub* stub) {
  grpc::ClientContext context;
  v1::ListSessionsResponse response;
  grpc::Status status =
      stub->ListSessions(&context, v1::ListSessionsRequest(), &response);
  if (!status.ok()) return ToAbsl(status);
  return response;
}

// Encodes floats as the wire's little-endian bytes of `type`.
inline std::string Encode(ElementType type, absl::Span<const float> values) {
  std::string out(values.size() * ElementSize(type), '\0');
  EncodeElements(type, values.data(), values.size(),
                 reinterpret_cast<std::byte*>(out.data()));
  return out;
}

// Core's view of a wire step (the bytes are shared, not copied): what an
// in-process reference session is fed.
struct CoreStep {
  std::vector<uint8_t> pinned;
  StepInput input;
};
inline CoreStep ToCoreStep(const v1::SessionStep& step) {
  CoreStep out;
  out.input.step = step.step();
  out.input.append.slot_ids = absl::MakeConstSpan(
      step.append().slot_ids().data(), step.append().slot_ids_size());
  for (const bool pinned : step.append().pinned()) {
    out.pinned.push_back(pinned ? 1 : 0);
  }
  out.input.append.pinned = out.pinned;
  out.input.append.keys = absl::MakeConstSpan(
      reinterpret_cast<const std::byte*>(step.append().keys().data()),
      step.append().keys().size());
  out.input.queries = absl::MakeConstSpan(
      reinterpret_cast<const std::byte*>(step.queries().data()),
      step.queries().size());
  if (step.has_entropy()) out.input.entropy = step.entropy();
  if (step.has_logits()) {
    out.input.logits = absl::MakeConstSpan(step.logits().values().data(),
                                           step.logits().values_size());
  }
  return out;
}

// Turns a synthetic stream into wire steps: step `n` appends the entries
// generated since step n-1 (a prefill of `prefill` entries at the first step,
// then one per step) with slot ids from `first_slot` upward, and queries the
// last generated step's query. Every `pin_every`-th entry is pinned (0: none);
// every `logits_every`-th step sends logits instead of the entropy (0: never).
class WireStepSource {
 public:
  WireStepSource(const Shape& shape, uint64_t seed, std::string session_id,
                 int prefill = 8, uint64_t first_slot = 1000, int pin_every = 0,
                 int logits_every = 0)
      : shape_(shape),
        stream_(MakeParams(shape, seed)),
        session_id_(std::move(session_id)),
        prefill_(prefill),
        next_slot_(first_slot),
        pin_every_(pin_every),
        logits_every_(logits_every) {}

  v1::SessionStep Next() {
    v1::SessionStep step;
    step.set_session_id(session_id_);
    step.set_step(first_step_ + steps_);
    const int entries = steps_ == 0 ? prefill_ : 1;
    std::vector<float> keys;
    bool any_pinned = false;
    std::vector<bool> pinned;
    for (int i = 0; i < entries; ++i) {
      stream_.Next(&synthetic_);
      keys.insert(keys.end(), synthetic_.key.begin(), synthetic_.key.end());
      step.mutable_append()->add_slot_ids(next_slot_);
      const bool pin =
          pin_every_ > 0 && appended_ % pin_every_ == pin_every_ - 1;
      pinned.push_back(pin);
      any_pinned |= pin;
      ++next_slot_;
      ++appended_;
    }
    if (any_pinned) {
      for (const bool pin : pinned) step.mutable_append()->add_pinned(pin);
    }
    step.mutable_append()->set_keys(Encode(shape_.element_type, keys));
    step.set_queries(Encode(shape_.element_type, synthetic_.query));
    if (logits_every_ > 0 && steps_ % logits_every_ == logits_every_ - 1) {
      // Logits whose softmax sharpens and flattens with the synthetic entropy.
      for (int v = 0; v < 32; ++v) {
        step.mutable_logits()->add_values(
            static_cast<float>((v % 7) * 1.5 / (0.2 + synthetic_.entropy)));
      }
    } else {
      step.set_entropy(synthetic_.entropy);
    }
    ++steps_;
    return step;
  }

  void set_first_step(uint64_t first) { first_step_ = first; }

 private:
  static SyntheticParams MakeParams(const Shape& shape, uint64_t seed) {
    SyntheticParams params;
    params.shape = shape;
    params.seed = seed;
    return params;
  }

  const Shape shape_;
  SyntheticStream stream_;
  SyntheticStep synthetic_;
  const std::string session_id_;
  const int prefill_;
  uint64_t next_slot_;
  const int pin_every_;
  const uint64_t logits_every_;
  uint64_t first_step_ = 1;
  uint64_t steps_ = 0;
  int64_t appended_ = 0;
};

// An in-process server, a channel and a stub for each test.
class ServerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    stub_.reset();
    channel_.reset();
    server_.reset();
  }

  void StartServer(const ServerOptions& options = TestServerOptions()) {
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->targets()[0],
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::EntroKv::NewStub(channel_);
  }

  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::EntroKv::Stub> stub_;
};

// A small shape used by most tests.
inline Shape SmallShape(ElementType type = ElementType::kF16) {
  Shape shape;
  shape.layers = 2;
  shape.kv_heads = 2;
  shape.q_heads = 4;
  shape.head_dim = 16;
  shape.element_type = type;
  return shape;
}

// A fixed-budget window session of SmallShape(type) on the CPU.
inline SessionConfig WindowConfig(int64_t budget,
                                  ElementType type = ElementType::kF16) {
  SessionConfig config;
  config.shape = SmallShape(type);
  config.budget = budget;
  config.ranking = Ranking::kWindow;
  config.budget_control = BudgetControl::kFixed;
  config.placement = Placement::kCpu;
  return config;
}

inline v1::Shape ToProtoShape(const Shape& shape) {
  v1::Shape out;
  out.set_layers(shape.layers);
  out.set_kv_heads(shape.kv_heads);
  out.set_q_heads(shape.q_heads);
  out.set_head_dim(shape.head_dim);
  switch (shape.element_type) {
    case ElementType::kF32:
      out.set_element_type(v1::ELEMENT_TYPE_F32);
      break;
    case ElementType::kF16:
      out.set_element_type(v1::ELEMENT_TYPE_F16);
      break;
    case ElementType::kBf16:
      out.set_element_type(v1::ELEMENT_TYPE_BF16);
      break;
  }
  return out;
}

// The wire form of a core configuration, written field by field here (not
// with the server's own conversion) so that tests check that conversion.
inline v1::SessionConfig ToWireConfig(const SessionConfig& config) {
  v1::SessionConfig out;
  *out.mutable_shape() = ToProtoShape(config.shape);
  out.set_budget(config.budget);
  constexpr v1::Ranking kRankings[] = {
      v1::RANKING_WINDOW,   v1::RANKING_STREAMING, v1::RANKING_H2O,
      v1::RANKING_TOVA,     v1::RANKING_KEYNORM,   v1::RANKING_RANDOM,
      v1::RANKING_AFFINITY, v1::RANKING_KEYDIFF,   v1::RANKING_EXPECTED,
      v1::RANKING_BIRTH,    v1::RANKING_RKV};
  out.set_ranking(kRankings[static_cast<int>(config.ranking)]);
  constexpr v1::BudgetControl kControls[] = {v1::BUDGET_CONTROL_FIXED,
                                             v1::BUDGET_CONTROL_ENTROPY,
                                             v1::BUDGET_CONTROL_THRESHOLD};
  out.set_budget_control(kControls[static_cast<int>(config.budget_control)]);
  out.mutable_affinity()->set_update(config.affinity.update ==
                                             AffinityUpdate::kSeed
                                         ? v1::AFFINITY_UPDATE_SEED
                                         : v1::AFFINITY_UPDATE_LOGIT_EMA);
  out.mutable_affinity()->set_beta(config.affinity.beta);
  out.mutable_affinity()->set_lambda(config.affinity.lambda);
  out.mutable_entropy_budget()->set_gamma(config.entropy_budget.gamma);
  out.mutable_entropy_budget()->set_ema_rate(config.entropy_budget.ema_rate);
  out.mutable_entropy_budget()->set_epsilon(config.entropy_budget.epsilon);
  out.mutable_entropy_budget()->set_min_budget(
      config.entropy_budget.min_budget);
  out.mutable_entropy_budget()->set_max_budget(
      config.entropy_budget.max_budget);
  out.mutable_h2o()->set_recent_fraction(config.h2o.recent_fraction);
  out.mutable_expected()->set_ema_rate(config.expected.ema_rate);
  out.mutable_birth()->set_weight(config.birth.weight);
  out.mutable_threshold()->set_tau(config.threshold.tau);
  out.mutable_rkv()->set_lambda(config.rkv.lambda);
  out.mutable_rkv()->set_sample(config.rkv.sample);
  out.set_streaming_sinks(config.streaming_sinks);
  out.set_seed(config.seed);
  out.mutable_protection()->set_sinks(config.protection.sinks);
  out.mutable_protection()->set_recent(config.protection.recent);
  out.set_block_size(config.block_size);
  out.set_block_reduce(config.block_reduce == BlockReduce::kMax
                           ? v1::BLOCK_REDUCE_MAX
                           : v1::BLOCK_REDUCE_MEAN);
  switch (config.placement) {
    case Placement::kCpu:
      out.set_placement(v1::PLACEMENT_CPU);
      break;
    case Placement::kGpu:
      out.set_placement(v1::PLACEMENT_GPU);
      break;
    case Placement::kAuto:
      out.set_placement(v1::PLACEMENT_AUTO);
      break;
  }
  return out;
}

// Creates a session of `config`; its id.
inline absl::StatusOr<std::string> CreateSessionId(
    v1::EntroKv::Stub* stub, const SessionConfig& config) {
  absl::StatusOr<v1::CreateSessionResponse> created =
      CreateSession(stub, ToWireConfig(config));
  if (!created.ok()) return created.status();
  return created->session_id();
}

}  // namespace entrokv::server::testing

#endif  // ENTROKV_TESTS_SERVER_SERVER_TEST_UTIL_H_
