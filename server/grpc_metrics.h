// GrpcServerMetrics: per-method RPC metrics of a gRPC server, named and
// labelled as the gRPC ecosystem's Prometheus interceptors name them
// (go-grpc-prometheus, go-grpc-middleware's providers/prometheus), so that
// their dashboards and alerts work unchanged:
//
//   grpc_server_started_total{grpc_type,grpc_service,grpc_method}
//   grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}
//   grpc_server_msg_received_total{grpc_type,grpc_service,grpc_method}
//   grpc_server_msg_sent_total{grpc_type,grpc_service,grpc_method}
//   grpc_server_handling_seconds{grpc_type,grpc_service,grpc_method}
//
// grpc_code is the Go name of the status code ("OK", "InvalidArgument",
// "ResourceExhausted", "Canceled", ...), grpc_type one of "unary",
// "client_stream", "server_stream", "bidi_stream". handling_seconds is, as
// there, an RPC's whole life (for a Decode stream: the stream's). Added for
// the streams, whose life says nothing of their latency:
//
//   entrokv_grpc_message_handling_seconds{grpc_type,grpc_service,grpc_method}
//
// the time from each request message's arrival to the server's answer to
// it (the next message it sends on that call), unary calls included.
// Histograms have the kRpcBoundsNs buckets (10 us to 1 s).
//
// The methods are fixed when the server starts (Create()); every series of
// a known method, each code of handled_total included, exists from the
// start at 0, so rate() and error ratios have data before the first error.
// A call to any other path (which a client chooses) is counted under
// grpc_service="unknown", grpc_method="unknown": a bound on the series.
//
// The counting is a server interceptor (InterceptorFactory()), so it sees
// every call of the server, whatever its service, as gRPC sends it.
//
// Thread-safety: all methods are thread-safe; counting is relaxed atomic
// additions, with no lock.

#ifndef ENTROKV_SERVER_GRPC_METRICS_H_
#define ENTROKV_SERVER_GRPC_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/metrics.h"

namespace entrokv::server {

class GrpcServerMetrics {
 public:
  // A method as the metrics label it.
  struct Method {
    std::string service;  // "entrokv.v1.EntroKv"
    std::string method;   // "Decode"
    grpc::experimental::ServerRpcInfo::Type type;
  };

  // The methods of the services named (found in the generated protobuf
  // descriptor pool; entrokv.v1.EntroKv, grpc.reflection.v1alpha....), and
  // grpc.health.v1.Health's Check and Watch, which gRPC's built-in health
  // service serves without a descriptor here.
  static std::vector<Method> MethodsOf(
      const std::vector<std::string>& services);

  explicit GrpcServerMetrics(std::vector<Method> methods);
  ~GrpcServerMetrics();
  GrpcServerMetrics(const GrpcServerMetrics&) = delete;
  GrpcServerMetrics& operator=(const GrpcServerMetrics&) = delete;

  // An interceptor factory counting into this object, for
  // ServerBuilder::experimental().SetInterceptorCreators(). REQUIRES: this
  // object outlives the gRPC server built with it.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  InterceptorFactory();

  // Appends every metric above, HELP and TYPE lines included.
  void AppendText(std::string* out) const;

  // The Go name of `code` ("OK", "Canceled", "ResourceExhausted").
  static absl::string_view CodeName(grpc::StatusCode code);

 private:
  struct PerMethod;
  class Interceptor;
  class Factory;

  // The counters of the method on `path` ("/service/Method"), or of
  // "unknown".
  PerMethod* Find(absl::string_view path);

  std::vector<std::unique_ptr<PerMethod>> methods_;  // "unknown" last.
  absl::flat_hash_map<std::string, PerMethod*> by_path_;  // Fixed at start.
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_GRPC_METRICS_H_
