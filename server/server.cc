#include "server/server.h"

#include <malloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#ifdef ENTROKV_HAVE_REFLECTION
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#endif
#include "server/reflection_v1.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/process_metrics.h"
#include "server/security.h"
#include "server/status_conversion.h"
#include "spdlog/spdlog.h"

namespace entrokv::server {
namespace {

constexpr char kServiceName[] = "entrokv.v1.EntroKv";
// gRPC's synchronous services (reflection) need a few threads to start.
constexpr int kMinGrpcThreads = 4;

int64_t GrpcMemoryBytes(const ServerOptions& options) {
  if (options.grpc_memory_bytes > 0) return options.grpc_memory_bytes;
  return std::max<int64_t>(int64_t{1} << 30, 4 * options.max_message_bytes);
}

// "host:port" with the port actually bound; wildcard hosts become loopback.
std::string TcpTarget(const std::string& address, int port) {
  std::string host = address.substr(0, address.rfind(':'));
  if (absl::StartsWith(host, "dns:")) host = host.substr(4);
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "[::]") host = "[::1]";
  return absl::StrCat(host, ":", port);
}

// "unix:PATH" / "unix-abstract:NAME" with a non-empty path, or "host:port"
// with a decimal port in [0, 65535] (gRPC would otherwise bind the port
// modulo 65536, or fail without saying why).
absl::Status ValidateListenAddress(const std::string& address) {
  if (address.empty())
    return absl::InvalidArgumentError("listen: empty address");
  if (IsUnixAddress(address)) {
    if (address.substr(address.find(':') + 1).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("listen: \"", address, "\" has an empty socket path"));
    }
    return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen: \"", address, "\" is neither host:port nor unix:PATH"));
  }
  const std::string port = address.substr(colon + 1);
  int64_t value = 0;
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(),
                   [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(port, &value) || value > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen: \"", address,
        "\" needs a decimal port in [0, 65535] after the last ':'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const ServerOptions& options) {
  if (options.listen.empty()) {
    return absl::InvalidArgumentError("listen: no address");
  }
  for (const std::string& address : options.listen) {
    if (absl::Status status = ValidateListenAddress(address); !status.ok()) {
      return status;
    }
  }
  if (options.max_sessions < 0) {
    return absl::InvalidArgumentError("max_sessions: negative");
  }
  if (options.max_live_entries < 0) {
    return absl::InvalidArgumentError("max_live_entries: negative");
  }
  if (options.max_bytes < 0) {
    return absl::InvalidArgumentError("max_bytes: negative");
  }
  if (options.max_gpu_bytes < 0) {
    return absl::InvalidArgumentError("max_gpu_bytes: negative");
  }
  if (options.max_message_bytes <= 0 || options.max_message_bytes > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes: must be in [1, ", INT_MAX, "]"));
  }
  if (options.max_streams < 0) {
    return absl::InvalidArgumentError("max_streams: negative");
  }
  if (options.max_steps_per_message <= 0) {
    return absl::InvalidArgumentError("max_steps_per_message: must be >= 1");
  }
  if (options.max_steps_per_session_per_message <= 0) {
    return absl::InvalidArgumentError(
        "max_steps_per_session_per_message: must be >= 1");
  }
  if (options.step_workers < 0 || options.step_workers > 1024) {
    return absl::InvalidArgumentError(
        "step_workers: must be in [0, 1024] (0: the CPUs this process may "
        "use)");
  }
  if (options.poll_threads < 1 || options.poll_threads > 1024) {
    return absl::InvalidArgumentError("poll_threads: must be in [1, 1024]");
  }
  if (options.max_echo_bytes < 0) {
    return absl::InvalidArgumentError("max_echo_bytes: negative");
  }
  if (options.max_shadows < 0) {
    return absl::InvalidArgumentError("max_shadows: negative");
  }
  if (options.max_shadow_reference_bytes <= 0) {
    return absl::InvalidArgumentError(
        "max_shadow_reference_bytes: must be >= 1");
  }
  if (options.max_shadow_bytes < 0) {
    return absl::InvalidArgumentError("max_shadow_bytes: negative");
  }
  if (options.grpc_memory_bytes < 0 ||
      (options.grpc_memory_bytes > 0 &&
       options.grpc_memory_bytes < 2 * options.max_message_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grpc_memory_bytes: must be 0 (automatic) or at least twice "
        "max_message_bytes (",
        2 * options.max_message_bytes, ")"));
  }
  if (options.grpc_max_threads < kMinGrpcThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpc_max_threads: must be >= ", kMinGrpcThreads));
  }
  if (options.idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("idle_timeout: must be positive");
  }
  if (!options.health_listen.empty()) {
    if (IsUnixAddress(options.health_listen)) {
      return absl::InvalidArgumentError(
          "health_listen: must be host:port (the API's unix sockets serve "
          "health already)");
    }
    if (absl::Status status = ValidateListenAddress(options.health_listen);
        !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("health_", status.message()));
    }
  }
  if (absl::StatusOr<mode_t> mode = ParseSocketMode(options.socket_mode);
      !mode.ok()) {
    return mode.status();
  }
  return absl::OkStatus();
}

// The server's security settings from its options; reads the token file.
absl::StatusOr<ServerSecurity> SecurityFromOptions(
    const ServerOptions& options) {
  ServerSecurity security;
  security.tls_cert_file = options.tls_cert_file;
  security.tls_key_file = options.tls_key_file;
  security.tls_client_ca_file = options.tls_client_ca_file;
  security.allow_insecure_tcp = options.allow_insecure_tcp;
  if (!options.auth_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(options.auth_token_file);
    if (!token.ok()) return token.status();
    security.auth_token = *std::move(token);
  }
  if (absl::Status status = ValidateSecurity(security); !status.ok()) {
    return status;
  }
  for (const std::string& address : options.listen) {
    if (absl::Status status = CheckPlaintextTcpAllowed(address, security);
        !status.ok()) {
      return status;
    }
  }
  return security;
}

// Server reflection on one ServerBuilder, or none. Linking gRPC's reflection
// library registers its plugin for every server of the process at static
// initialization; this option removes it, and adds it back only where
// reflection is asked for (never on the health-only server).
class ReflectionOption final : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool enable) : enable_(enable) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    std::erase_if(*plugins, [](const auto& plugin) {
      return plugin->name() == "proto_server_reflection";
    });
#ifdef ENTROKV_HAVE_REFLECTION
    if (enable_) {
      plugins->push_back(
          std::make_unique<grpc::reflection::ProtoServerReflectionPlugin>());
    }
#endif
  }

 private:
  const bool enable_;
};

// "listen: cannot bind A: cause; cannot bind B: cause", over the addresses
// whose cause is found, or the vague message when none is.
std::string BindFailureMessage(absl::string_view flag,
                               const std::vector<std::string>& addresses) {
  std::vector<std::string> causes;
  for (const std::string& address : addresses) {
    const std::string cause = DiagnoseBindFailure(address);
    if (!cause.empty()) {
      causes.push_back(absl::StrCat("cannot bind ", address, ": ", cause));
    }
  }
  if (causes.empty()) {
    return absl::StrCat(flag, ": could not bind ",
                        absl::StrJoin(addresses, ", "),
                        " (no cause found: address in use, not local, or not "
                        "resolvable)");
  }
  return absl::StrCat(flag, ": ", absl::StrJoin(causes, "; "));
}

// What the startup line says of a listener: the address with its bound
// port, and its protection.
std::string DescribeListener(const std::string& address, int port,
                             const ServerSecurity& security,
                             const ServerOptions& options) {
  std::string out =
      IsUnixAddress(address)
          ? absl::StrCat(address, " (mode ", options.socket_mode,
                         options.socket_group.empty()
                             ? std::string()
                             : absl::StrCat(" group ", options.socket_group),
                         ")")
          : absl::StrCat(HostOf(address), ":", port,
                         security.tls_cert_file.empty()        ? " (plaintext)"
                         : security.tls_client_ca_file.empty() ? " (TLS)"
                                                               : " (mTLS)");
  if (!security.auth_token.empty()) absl::StrAppend(&out, " [token]");
  return out;
}

// Gives freed heap memory back to the OS once sessions and streams have gone.
// glibc keeps freed chunks in its arenas (one per allocating thread), so a
// server that once held 1,000 sessions would keep that peak RSS for good;
// malloc_trim(0) releases every whole free page of every arena. It locks each
// arena while it walks it, so it runs from the reaper (no lock of ours held),
// at most once per kMinInterval, and only when sessions or streams fell by a
// margin from their high-water mark since the last trim, when the CPU bytes
// held fell by kBytes, or when the server has just gone idle.
class HeapTrimmer {
 public:
  void Observe(int64_t sessions, int64_t streams, int64_t bytes,
               absl::Time now) {
    peak_sessions_ = std::max(peak_sessions_, sessions);
    peak_streams_ = std::max(peak_streams_, streams);
    peak_bytes_ = std::max(peak_bytes_, bytes);
    const bool fell = peak_sessions_ - sessions >= kCount ||
                      peak_streams_ - streams >= kCount ||
                      peak_bytes_ - bytes >= kBytes;
    const bool went_idle = sessions == 0 && streams == 0 &&
                           (peak_sessions_ > 0 || peak_streams_ > 0);
    if (!(fell || went_idle) || now - last_trim_ < kMinInterval) return;
    const absl::Time start = absl::Now();
    const bool released = malloc_trim(0) != 0;
    last_trim_ = absl::Now();
    spdlog::debug(
        "malloc_trim after {} -> {} sessions, {} -> {} streams: {} in {}",
        peak_sessions_, sessions, peak_streams_, streams,
        released ? "memory returned" : "nothing to return",
        absl::FormatDuration(last_trim_ - start));
    peak_sessions_ = sessions;
    peak_streams_ = streams;
    peak_bytes_ = bytes;
  }

 private:
  static constexpr int64_t kCount = 64;
  static constexpr int64_t kBytes = int64_t{64} << 20;
  static constexpr absl::Duration kMinInterval = absl::Seconds(10);

  int64_t peak_sessions_ = 0;
  int64_t peak_streams_ = 0;
  int64_t peak_bytes_ = 0;
  absl::Time last_trim_ = absl::InfinitePast();
};

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(
    const ServerOptions& options) {
  if (absl::Status status = ValidateOptions(options); !status.ok()) {
    return status;
  }
  absl::StatusOr<ServerSecurity> security = SecurityFromOptions(options);
  if (!security.ok()) return security.status();
  std::unique_ptr<Server> server(new Server(options));
  std::vector<std::shared_ptr<grpc::ServerCredentials>> credentials;
  for (const std::string& address : options.listen) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> made =
        MakeListenerCredentials(address, *security, &server->metrics_);
    if (!made.ok()) return made.status();
    credentials.push_back(*std::move(made));
    if (absl::StartsWith(address, "unix:")) {
      // gRPC unlinks an existing socket file: do not orphan a live server.
      if (absl::Status status = CheckUnixSocketFree(address.substr(5));
          !status.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("listen: ", status.message()));
      }
    }
  }
  std::optional<gid_t> socket_group;
  if (!options.socket_group.empty()) {
    absl::StatusOr<gid_t> gid = ResolveGroup(options.socket_group);
    if (!gid.ok()) return gid.status();
    socket_group = *gid;
  }
  const mode_t socket_mode = *ParseSocketMode(options.socket_mode);

  BackendOptions cpu_options;
  cpu_options.max_bytes = options.max_bytes;
  absl::StatusOr<std::unique_ptr<Backend>> cpu =
      CreateBackend(BackendKind::kCpu, cpu_options);
  if (!cpu.ok()) return cpu.status();
  server->cpu_ = *std::move(cpu);
  if (options.use_gpu && CudaBackendCompiled()) {
    BackendOptions gpu_options;
    gpu_options.max_bytes = options.max_gpu_bytes;
    gpu_options.device = options.gpu_device;
    absl::StatusOr<std::unique_ptr<Backend>> gpu =
        CreateBackend(BackendKind::kCuda, gpu_options);
    if (gpu.ok()) {
      server->gpu_ = *std::move(gpu);
    } else {
      spdlog::info("no GPU backend: {}", gpu.status().ToString());
    }
  }

  RegistryOptions registry_options;
  registry_options.max_sessions = options.max_sessions;
  registry_options.max_live_entries = options.max_live_entries;
  registry_options.idle_timeout = options.idle_timeout;
  registry_options.shadow_limits.max_shadows = options.max_shadows;
  registry_options.shadow_limits.max_reference_bytes =
      options.max_shadow_reference_bytes;
  registry_options.max_shadow_bytes = options.max_shadow_bytes;
  server->registry_ = std::make_unique<SessionRegistry>(
      registry_options, server->cpu_.get(), server->gpu_.get());
  ServiceLimits limits;
  limits.max_message_bytes = options.max_message_bytes;
  limits.max_bytes = options.max_bytes;
  limits.max_gpu_bytes = options.max_gpu_bytes;
  limits.max_streams = options.max_streams;
  limits.max_steps_per_message = options.max_steps_per_message;
  limits.max_steps_per_session_per_message =
      options.max_steps_per_session_per_message;
  limits.enable_echo = options.enable_echo;
  limits.max_echo_bytes = options.max_echo_bytes;
  limits.step_workers = options.step_workers > 0 ? options.step_workers
                                                 : DefaultStepWorkers();
  server->service_ = std::make_unique<EntroKvService>(
      server->registry_.get(), limits, &server->metrics_);

  // Before the gRPC server, so that a metrics address that cannot be bound
  // stops the start before any API port is open.
  if (!options.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
        MetricsHttpServer::Start(options.metrics_listen, [s = server.get()] {
          return s->MetricsText();
        });
    if (!http.ok()) return http.status();
    server->metrics_http_ = *std::move(http);
  }

  std::vector<std::string> services = {kServiceName};
  if (options.enable_reflection) {
#ifdef ENTROKV_HAVE_REFLECTION
    services.push_back("grpc.reflection.v1alpha.ServerReflection");
#endif
    services.push_back("grpc.reflection.v1.ServerReflection");
    // What list_services answers: these and the health service.
    std::vector<std::string> listed = services;
    listed.push_back("grpc.health.v1.Health");
    server->reflection_v1_ =
        std::make_unique<ReflectionV1Service>(std::move(listed));
  }
  server->grpc_metrics_ = std::make_unique<GrpcServerMetrics>(
      GrpcServerMetrics::MethodsOf(services));

  // Health is served by our own HealthService, on our own pollers: SERVING
  // from the first call it can answer (a start that fails serves none).
  grpc::EnableDefaultHealthCheckService(false);
  for (HealthService* health :
       {&server->health_, &server->health_port_health_}) {
    health->SetServing({"", kServiceName}, true);
  }
  grpc::ServerBuilder builder;
  {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(server->grpc_metrics_->InterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  builder.SetOption(
      std::make_unique<ReflectionOption>(options.enable_reflection));
  // Two servers on one port must not both start silently: gRPC sets
  // SO_REUSEPORT by default, and a second server would then share the port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Notice dead clients, so that their sessions become attachable again.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // gRPC's own buffers and threads: under memory pressure it shrinks flow
  // control windows, stops accepting connections and cancels calls rather
  // than growing without bound.
  grpc::ResourceQuota quota("entrokv");
  quota.Resize(static_cast<size_t>(GrpcMemoryBytes(options)));
  quota.SetMaxThreads(options.grpc_max_threads);
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  std::vector<int> ports(options.listen.size(), 0);
  for (size_t i = 0; i < options.listen.size(); ++i) {
    builder.AddListeningPort(options.listen[i], credentials[i], &ports[i]);
  }
  builder.RegisterService(server->service_.get());
  builder.RegisterService(&server->health_);
  server->pollers_ = std::make_unique<CallPollers>(
      options.poll_threads, &builder,
      [s = server.get()](grpc::ServerCompletionQueue* queue, LiveCalls* live) {
        s->service_->RequestCalls(queue, live);
        s->health_.RequestCalls(queue, live);
      });
  if (server->reflection_v1_ != nullptr) {
    builder.RegisterService(server->reflection_v1_.get());
  }
  {
    // Unix sockets are created owner-only, then given socket_mode: never
    // wider than asked, not even for a moment. (umask is per process; no
    // other thread of ours creates files during start.)
    const mode_t old_umask = umask(0177);
    server->grpc_server_ = builder.BuildAndStart();
    umask(old_umask);
  }
  if (server->grpc_server_ == nullptr) {
    // ~Server() copes with a server that never started.
    return absl::UnavailableError(BindFailureMessage("listen", options.listen));
  }
  server->pollers_->Start();
  std::vector<std::string> bound;
  for (size_t i = 0; i < options.listen.size(); ++i) {
    const std::string& address = options.listen[i];
    if (IsUnixAddress(address)) {
      server->targets_.push_back(address);
      if (absl::StartsWith(address, "unix:")) {
        // ~Server() shuts the started gRPC server down.
        if (absl::Status status = ApplySocketPermissions(
                address.substr(5), socket_mode, socket_group);
            !status.ok()) {
          return status;
        }
      }
    } else {
      if (ports[i] == 0) {
        // ~Server() shuts the started gRPC server down.
        return absl::UnavailableError(BindFailureMessage("listen", {address}));
      }
      server->targets_.push_back(TcpTarget(address, ports[i]));
    }
    bound.push_back(DescribeListener(address, ports[i], *security, options));
  }
  if (!options.health_listen.empty()) {
    grpc::ServerBuilder health_builder;
    health_builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    health_builder.SetOption(std::make_unique<ReflectionOption>(false));
    // Anyone who reaches the port may call it (probes come from the node):
    // its own small quota and a cap on streams per connection bound what
    // long-lived Health/Watch calls can hold.
    grpc::ResourceQuota health_quota("entrokv-health");
    health_quota.Resize(16 << 20);
    health_quota.SetMaxThreads(4);
    health_builder.SetResourceQuota(health_quota);
    health_builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 4);
    health_builder.SetMaxReceiveMessageSize(4 << 10);
    // Any other method is answered UNIMPLEMENTED (by gRPC, on this queue).
    health_builder.RegisterService(&server->health_port_health_);
    server->health_pollers_ = std::make_unique<CallPollers>(
        1, &health_builder,
        [s = server.get()](grpc::ServerCompletionQueue* queue,
                           LiveCalls* live) {
          s->health_port_health_.RequestCalls(queue, live);
        });
    int health_port = 0;
    health_builder.AddListeningPort(
        options.health_listen, grpc::InsecureServerCredentials(), &health_port);
    server->health_server_ = health_builder.BuildAndStart();
    if (server->health_server_ == nullptr || health_port == 0) {
      return absl::UnavailableError(
          BindFailureMessage("health_listen", {options.health_listen}));
    }
    server->health_pollers_->Start();
    server->health_target_ = TcpTarget(options.health_listen, health_port);
  }
  server->reaper_ = std::thread([s = server.get()] { s->ReapLoop(); });

  std::string listening = absl::StrCat("API ", absl::StrJoin(bound, ", "));
  if (server->health_server_ != nullptr) {
    absl::StrAppend(
        &listening, "; health ", HostOf(options.health_listen), ":",
        server->health_target_.substr(server->health_target_.rfind(':') + 1),
        " (plaintext, health only)");
  }
  if (server->metrics_http_ != nullptr) {
    absl::StrAppend(&listening, "; metrics http://",
                    server->metrics_http_->address(), "/metrics");
  }
  if (options.enable_reflection) absl::StrAppend(&listening, "; reflection on");
  spdlog::info(
      "entrokv server listening on {}; backends: {}; max_sessions {}, "
      "max_live_entries {}, max_bytes {}, max_gpu_bytes {}, "
      "max_message_bytes {}, max_streams {}, max_steps_per_message {}, "
      "max_steps_per_session_per_message {}, echo {}, grpc_memory_bytes {}, "
      "grpc_max_threads {}, idle_timeout {}, max_shadows {} "
      "(max_shadow_reference_bytes {}, max_shadow_bytes {}), step_workers {}, "
      "poll_threads {}",
      listening, server->DescribeBackends(), options.max_sessions,
      options.max_live_entries, options.max_bytes, options.max_gpu_bytes,
      options.max_message_bytes, options.max_streams,
      options.max_steps_per_message, options.max_steps_per_session_per_message,
      options.enable_echo
          ? absl::StrCat("on (max_echo_bytes ", options.max_echo_bytes, ")")
          : std::string("off"),
      GrpcMemoryBytes(options), options.grpc_max_threads,
      absl::FormatDuration(options.idle_timeout), options.max_shadows,
      options.max_shadow_reference_bytes, options.max_shadow_bytes,
      server->service_->step_workers(), options.poll_threads);
  return server;
}

Server::~Server() { Shutdown(absl::ZeroDuration()); }

std::string Server::metrics_address() const {
  return metrics_http_ == nullptr ? std::string() : metrics_http_->address();
}

std::string Server::MetricsText() const {
  ServerGauges gauges;
  gauges.sessions_open = registry_->size();
  gauges.sessions_created = registry_->created_total();
  gauges.sessions_closed = registry_->closed_total();
  gauges.sessions_reclaimed = registry_->reclaimed_total();
  gauges.live_entries = registry_->live_entries();
  gauges.cpu_bytes_held = registry_->cpu_bytes_held();
  gauges.gpu_bytes_held = registry_->gpu_bytes_held();
  gauges.streams_open = service_->open_streams();
  gauges.gpu_available = registry_->gpu_available();
  gauges.max_sessions = options_.max_sessions;
  gauges.max_live_entries = options_.max_live_entries;
  gauges.max_cpu_bytes = options_.max_bytes;
  gauges.max_gpu_bytes = options_.max_gpu_bytes;
  gauges.max_streams = options_.max_streams;
  gauges.shadow_bytes_reserved = registry_->shadow_bytes_reserved();
  gauges.max_shadow_bytes = options_.max_shadow_bytes;
  std::string text = metrics_.RenderText(gauges);
  if (grpc_metrics_ != nullptr) grpc_metrics_->AppendText(&text);
  AppendProcessMetrics(&text);
  return text;
}

std::string Server::DescribeBackends() const {
  std::string out = cpu_->Describe();
  if (gpu_ != nullptr) absl::StrAppend(&out, ", ", gpu_->Describe());
  return out;
}

void Server::Shutdown(absl::Duration drain) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      mu_.Await(absl::Condition(&stopped_));
      return;
    }
    stopping_ = true;
  }
  metrics_.DrainStarted();
  if (grpc_server_ != nullptr) {
    spdlog::info("shutting down: draining open streams for up to {}",
                 absl::FormatDuration(drain));
    for (HealthService* health : {&health_, &health_port_health_}) {
      // Both names at once: a watcher of one that sees NOT_SERVING finds
      // the other so too.
      health->SetServing({"", kServiceName}, false);
    }
    // A watcher of the API port has seen NOT_SERVING; it does not hold the
    // drain open.
    health_.EndWatches();
    const auto deadline =
        std::chrono::system_clock::now() + absl::ToChronoNanoseconds(drain);
    grpc_server_->Shutdown(deadline);
    grpc_server_->Wait();
  }
  // After the gRPC server: its shutdown ended the calls the pollers carry.
  if (pollers_ != nullptr) pollers_->Stop();
  // Probes see NOT_SERVING on the health port for the whole drain.
  if (health_server_ != nullptr) {
    health_port_health_.EndWatches();
    health_server_->Shutdown(std::chrono::system_clock::now());
    health_server_->Wait();
  }
  if (health_pollers_ != nullptr) health_pollers_->Stop();
  // A Start() that failed may have left no gRPC server, reaper or registry.
  if (reaper_.joinable()) reaper_.join();
  metrics_http_.reset();
  if (grpc_server_ != nullptr && registry_ != nullptr) {
    spdlog::info("server stopped; {} sessions were open", registry_->size());
  }
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

void Server::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&stopped_));
}

void Server::ReapLoop() {
  absl::Duration interval = options_.reap_interval;
  if (interval <= absl::ZeroDuration()) {
    interval = std::min(options_.idle_timeout / 4, absl::Seconds(1));
  }
  HeapTrimmer trimmer;
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval)) {
    mu_.Unlock();
    const absl::Time now = absl::Now();
    registry_->Reap(now);
    trimmer.Observe(registry_->size(), service_->open_streams(),
                    registry_->cpu_bytes_held(), now);
    mu_.Lock();
  }
}

}  // namespace entrokv::server
