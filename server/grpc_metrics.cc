#include "server/grpc_metrics.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/prometheus_text.h"
#include "google/protobuf/descriptor.h"

namespace entrokv::server {
namespace {

using Type = grpc::experimental::ServerRpcInfo::Type;
using grpc::experimental::InterceptionHookPoints;

// Every gRPC status code, by value (grpc::StatusCode 0..16).
constexpr size_t kCodes = 17;
constexpr std::array<absl::string_view, kCodes> kCodeNames = {
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated"};

absl::string_view TypeName(Type type) {
  switch (type) {
    case Type::UNARY:
      return "unary";
    case Type::CLIENT_STREAMING:
      return "client_stream";
    case Type::SERVER_STREAMING:
      return "server_stream";
    case Type::BIDI_STREAMING:
      return "bidi_stream";
  }
  return "unknown";
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Header(std::string* out, absl::string_view name, absl::string_view type,
            absl::string_view help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type,
                  "\n");
}

}  // namespace

struct GrpcServerMetrics::PerMethod {
  PerMethod(std::string labels) : labels(std::move(labels)) {}

  const std::string labels;  // grpc_type="...",grpc_service="...",...
  std::atomic<int64_t> started{0};
  std::atomic<int64_t> received{0};
  std::atomic<int64_t> sent{0};
  std::array<std::atomic<int64_t>, kCodes> handled = {};
  DurationHistogram handling{kRpcBoundsNs};
  DurationHistogram message_handling{kRpcBoundsNs};
};

// One per call; gRPC creates it when the call starts and deletes it when
// the call is done. A call's hooks may run on different threads, but not
// two at once for the same batch; the received time is atomic because a
// stream's receive and send batches may overlap.
class GrpcServerMetrics::Interceptor final
    : public grpc::experimental::Interceptor {
 public:
  explicit Interceptor(PerMethod* method) : method_(method) {
    method_->started.fetch_add(1, std::memory_order_relaxed);
  }

  ~Interceptor() override {
    // A call that ended without a status sent (cancelled before it had
    // one) counts as Canceled.
    if (!handled_) Handled(grpc::StatusCode::CANCELLED);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* batch) override {
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE) &&
        batch->GetRecvMessage() != nullptr) {
      method_->received.fetch_add(1, std::memory_order_relaxed);
      received_ns_.store(NowNs(), std::memory_order_relaxed);
    }
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      method_->sent.fetch_add(1, std::memory_order_relaxed);
      const int64_t received =
          received_ns_.exchange(0, std::memory_order_relaxed);
      if (received != 0) method_->message_handling.Observe(NowNs() - received);
    }
    if (batch->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS) &&
        !handled_) {
      Handled(batch->GetSendStatus().error_code());
    }
    batch->Proceed();
  }

 private:
  void Handled(grpc::StatusCode code) {
    handled_ = true;
    const size_t index = static_cast<size_t>(code);
    method_->handled[index < kCodes ? index : 2 /* Unknown */].fetch_add(
        1, std::memory_order_relaxed);
    method_->handling.Observe(NowNs() - start_ns_);
  }

  PerMethod* const method_;
  const int64_t start_ns_ = NowNs();
  std::atomic<int64_t> received_ns_{0};
  bool handled_ = false;
};

class GrpcServerMetrics::Factory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(GrpcServerMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new Interceptor(metrics_->Find(info->method()));
  }

 private:
  GrpcServerMetrics* const metrics_;
};

std::vector<GrpcServerMetrics::Method> GrpcServerMetrics::MethodsOf(
    const std::vector<std::string>& services) {
  std::vector<Method> methods;
  const google::protobuf::DescriptorPool* pool =
      google::protobuf::DescriptorPool::generated_pool();
  for (const std::string& name : services) {
    const google::protobuf::ServiceDescriptor* service =
        pool->FindServiceByName(name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* m = service->method(i);
      const Type type = m->client_streaming()
                            ? (m->server_streaming() ? Type::BIDI_STREAMING
                                                     : Type::CLIENT_STREAMING)
                            : (m->server_streaming() ? Type::SERVER_STREAMING
                                                     : Type::UNARY);
      methods.push_back({name, m->name(), type});
    }
  }
  methods.push_back({"grpc.health.v1.Health", "Check", Type::UNARY});
  methods.push_back({"grpc.health.v1.Health", "Watch", Type::SERVER_STREAMING});
  return methods;
}

GrpcServerMetrics::GrpcServerMetrics(std::vector<Method> methods) {
  for (const Method& m : methods) {
    const std::string path = absl::StrCat("/", m.service, "/", m.method);
    if (by_path_.contains(path)) continue;
    methods_.push_back(std::make_unique<PerMethod>(absl::StrCat(
        "grpc_type=\"", TypeName(m.type), "\",grpc_service=\"",
        EscapePrometheusLabel(m.service), "\",grpc_method=\"",
        EscapePrometheusLabel(m.method), "\"")));
    by_path_[path] = methods_.back().get();
  }
  methods_.push_back(std::make_unique<PerMethod>(
      "grpc_type=\"unknown\",grpc_service=\"unknown\",grpc_method=\"unknown\""));
}

GrpcServerMetrics::~GrpcServerMetrics() = default;

GrpcServerMetrics::PerMethod* GrpcServerMetrics::Find(absl::string_view path) {
  const auto it = by_path_.find(path);
  return it != by_path_.end() ? it->second : methods_.back().get();
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
GrpcServerMetrics::InterceptorFactory() {
  return std::make_unique<Factory>(this);
}

absl::string_view GrpcServerMetrics::CodeName(grpc::StatusCode code) {
  const size_t index = static_cast<size_t>(code);
  return index < kCodes ? kCodeNames[index] : "Unknown";
}

void GrpcServerMetrics::AppendText(std::string* out) const {
  const auto counter = [&](absl::string_view name, absl::string_view help,
                           std::atomic<int64_t> PerMethod::*field) {
    Header(out, name, "counter", help);
    for (const auto& m : methods_) {
      absl::StrAppend(out, name, "{", m->labels, "} ",
                      ((*m).*field).load(std::memory_order_relaxed), "\n");
    }
  };
  counter("grpc_server_started_total", "RPCs started on the server.",
          &PerMethod::started);
  Header(out, "grpc_server_handled_total", "counter",
         "RPCs completed on the server, by gRPC status code.");
  for (const auto& m : methods_) {
    for (size_t code = 0; code < kCodes; ++code) {
      absl::StrAppend(out, "grpc_server_handled_total{", m->labels,
                      ",grpc_code=\"", kCodeNames[code], "\"} ",
                      m->handled[code].load(std::memory_order_relaxed), "\n");
    }
  }
  counter("grpc_server_msg_received_total",
          "Request messages received on the server.", &PerMethod::received);
  counter("grpc_server_msg_sent_total", "Response messages sent by the server.",
          &PerMethod::sent);
  Header(out, "grpc_server_handling_seconds", "histogram",
         "Time from an RPC's start to its status, seconds (a stream's whole "
         "life).");
  for (const auto& m : methods_) {
    AppendHistogramSamples(out, "grpc_server_handling_seconds", m->labels,
                           m->handling);
  }
  Header(out, "entrokv_grpc_message_handling_seconds", "histogram",
         "Time from a request message's arrival to the server's answer to "
         "it, seconds.");
  for (const auto& m : methods_) {
    AppendHistogramSamples(out, "entrokv_grpc_message_handling_seconds",
                           m->labels, m->message_handling);
  }
}

}  // namespace entrokv::server
