// Server: the entrokv gRPC server, runnable in process (tests) or from main.
//
// Start() creates the backends (CPU always; CUDA when compiled, enabled and a
// device is present), the session registry and the gRPC server with the
// entrokv.v1.EntroKv service, the standard health service (grpc.health.v1,
// server/health_service.h) and, when enabled, server reflection, listening on every address of
// ServerOptions::listen ("host:port" with a port in [0, 65535], 0 picking a
// free port; "unix:/path"), with the credentials of server/security.h (TLS,
// mutual TLS, bearer token; plaintext non-loopback TCP refused unless
// allowed). Unix sockets get ServerOptions::socket_mode/socket_group. An
// optional second gRPC server on health_listen serves health only. A bind
// failure is diagnosed (DiagnoseBindFailure). A reaper thread reclaims
// sessions detached for longer than the idle timeout. Every call of the API
// and health services runs on the server's own poller threads
// (server/call_pollers.h; ServerOptions::poll_threads).
//
// Resource bounds: the work of one Decode message (max_steps_per_message,
// max_steps_per_session_per_message) is refused before any of it is done;
// each stream has at most one request in flight (the service reads the next
// only after answering), so streams (max_streams) times max_message_bytes
// bounds what requests hold; gRPC's own buffers and threads are bounded by a
// grpc::ResourceQuota (grpc_memory_bytes, grpc_max_threads).
//
// With ServerOptions::metrics_listen set, an HTTP endpoint serves the
// server's metrics in the Prometheus text format (server/metrics.h).
//
// Shutdown() sets health to NOT_SERVING (on the health listener too), ends
// the API port's health Watch calls, stops accepting calls, lets open streams run until the drain deadline, then cancels
// what is left and waits for every call to end. It is idempotent; the
// destructor calls it with no drain time.
//
// Thread-safety: all methods are thread-safe.

#ifndef ENTROKV_SERVER_SERVER_H_
#define ENTROKV_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "entrokv/core/backend.h"
#include "grpcpp/server.h"
#include "server/grpc_metrics.h"
#include "server/metrics.h"
#include "server/service.h"
#include "server/call_pollers.h"
#include "server/health_service.h"
#include "server/session_registry.h"

namespace entrokv::server {

struct ServerOptions {
  // API listeners. The default keeps the API off the network.
  std::vector<std::string> listen = {"unix:/run/entrokv/entrokv.sock"};
  int64_t max_sessions = 4096;           // 0: unlimited.
  int64_t max_live_entries = 1 << 20;    // Per session; 0: unlimited.
  int64_t max_bytes = int64_t{8} << 30;  // CPU bytes held; 0: unlimited.
  int64_t max_gpu_bytes = 0;             // GPU bytes held; 0: unlimited.
  int64_t max_message_bytes = 64 << 20;  // Each way.
  // Decode and Echo streams open at once, all clients together; 0: unlimited.
  int64_t max_streams = 1024;
  // Entries in each of a DecodeRequest's attach, steps and detach lists.
  int64_t max_steps_per_message = 1024;
  // Steps of one session in one DecodeRequest.
  int64_t max_steps_per_session_per_message = 16;
  // Threads the steps of one DecodeRequest run on, in parallel over its
  // sessions, shared by every stream (StepPool); 0: DefaultStepWorkers(),
  // the CPUs this process may use. 1: every step on its stream's thread.
  int step_workers = 0;
  // Threads that carry the API's calls (CallPollers), each polling its own
  // completion queue; a call stays on the thread that accepted it
  // (docs/performance.md). The health listener has one of its own.
  int poll_threads = 1;
  // Shadow policies (proto's Shadowing): per session, and the bytes one
  // session's reference and all sessions' shadowing may take.
  int32_t max_shadows = 4;  // 0: shadowing is off.
  int64_t max_shadow_reference_bytes = int64_t{64} << 20;
  int64_t max_shadow_bytes = int64_t{1} << 30;  // 0: unlimited.
  bool enable_echo = false;          // The load-test baseline RPC.
  int64_t max_echo_bytes = 1 << 20;  // Largest Echo reply; 0: unlimited.
  // gRPC's ResourceQuota: memory for its buffers (0: the larger of 1 GiB and
  // 4 * max_message_bytes; else at least 2 * max_message_bytes) and threads
  // for its synchronous services (reflection).
  int64_t grpc_memory_bytes = 0;
  int grpc_max_threads = 16;
  absl::Duration idle_timeout = absl::Minutes(5);
  // How often the reaper looks; zero: min(idle_timeout / 4, 1 s).
  absl::Duration reap_interval = absl::ZeroDuration();
  bool use_gpu = true;  // Try the CUDA backend.
  int gpu_device = 0;
  // HTTP address of the Prometheus endpoint (GET /metrics): "IPv4:port"
  // (port 0 picks one), "localhost:port", ":port"; empty: none.
  std::string metrics_listen;

  // --- Security, health port, unix socket permissions (server/security.h).
  // A health-only listener ("host:port", plaintext, no token): serves
  // grpc.health.v1 and nothing else. Empty: none.
  std::string health_listen;
  // PEM files. tls_cert_file and tls_key_file set: every TCP API listener
  // uses TLS; tls_client_ca_file set too: clients must present a
  // certificate signed by it (mutual TLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // A file holding the bearer token every API call must carry
  // ("authorization: Bearer <token>"); empty: no token.
  std::string auth_token_file;
  // Plaintext TCP on a non-loopback address is refused unless this is set.
  bool allow_insecure_tcp = false;
  bool enable_reflection = false;  // grpc.reflection.v1alpha on the API.
  // Mode (octal) and group (name or gid; empty: unchanged) of each unix
  // socket, set right after it is bound.
  std::string socket_mode = "0660";
  std::string socket_group;
};

class Server {
 public:
  // Errors: InvalidArgument (bad option), Unavailable (an address could not be
  // bound).
  static absl::StatusOr<std::unique_ptr<Server>> Start(
      const ServerOptions& options);

  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // One target per ServerOptions::listen entry, usable by a client: TCP
  // addresses with their bound port ("127.0.0.1:41234"), unix ones as given.
  const std::vector<std::string>& targets() const { return targets_; }
  // The health-only listener's target ("127.0.0.1:41235"); empty: none.
  const std::string& health_target() const { return health_target_; }

  // See the file comment. Returns once every call has ended.
  void Shutdown(absl::Duration drain);
  // Blocks until Shutdown() has completed (from another thread).
  void Wait();

  SessionRegistry& registry() { return *registry_; }
  // Decode and Echo streams open now.
  int64_t open_streams() const { return service_->open_streams(); }
  const ServerOptions& options() const { return options_; }
  std::string DescribeBackends() const;

  // The metrics endpoint's "host:port" with its bound port; empty when
  // ServerOptions::metrics_listen is.
  std::string metrics_address() const;
  // What GET /metrics serves now (docs/observability.md).
  std::string MetricsText() const;

 private:
  explicit Server(const ServerOptions& options) : options_(options) {}
  void ReapLoop();

  const ServerOptions options_;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> gpu_;
  std::unique_ptr<SessionRegistry> registry_;
  ServerMetrics metrics_;
  // RPC metrics of the API server (its interceptor); outlives grpc_server_.
  std::unique_ptr<GrpcServerMetrics> grpc_metrics_;
  std::unique_ptr<EntroKvService> service_;
  std::unique_ptr<grpc::Service> reflection_v1_;  // With enable_reflection.
  HealthService health_;
  // The API's queues and threads; outlive grpc_server_.
  std::unique_ptr<CallPollers> pollers_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::vector<std::string> targets_;
  // The health listener's service, queue and thread (with health_listen).
  HealthService health_port_health_;
  std::unique_ptr<CallPollers> health_pollers_;
  std::unique_ptr<grpc::Server> health_server_;  // Null: no health listener.
  std::string health_target_;
  std::thread reaper_;
  // Stopped by Shutdown(), after the gRPC server: a drain stays observable.
  std::unique_ptr<MetricsHttpServer> metrics_http_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_SERVER_H_
