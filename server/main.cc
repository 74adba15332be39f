// entrokv-server: the entrokv gRPC sidecar.
//
// Parses flags, starts the server, waits for SIGTERM or SIGINT, then drains
// (health NOT_SERVING, open streams may finish until --drain_timeout) and
// exits 0. A bad command line exits 2; valid flags the machine refuses (an
// address it cannot bind, a file it cannot read) exit 1.

#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "server/log_format.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::vector<std::string>, listen, {"unix:/run/entrokv/entrokv.sock"},
          "Comma-separated API listen addresses: unix:/path/to.sock and/or "
          "host:port (port 0 picks one). Plaintext TCP off loopback needs "
          "--allow_insecure_tcp; see --tls_cert");
ABSL_FLAG(int64_t, max_sessions, 4096,
          "Most open sessions; past it CreateSession is RESOURCE_EXHAUSTED "
          "(0: unlimited)");
ABSL_FLAG(int64_t, max_live_entries, int64_t{1} << 20,
          "Most live entries per session; a step appending past it is "
          "RESOURCE_EXHAUSTED (0: unlimited)");
ABSL_FLAG(int64_t, max_bytes, int64_t{8} << 30,
          "Most bytes of session state held in host memory, all sessions "
          "together (0: unlimited)");
ABSL_FLAG(int64_t, max_gpu_bytes, 0,
          "Most bytes of session state held on the GPU (0: unlimited)");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{64} << 20,
          "Largest message accepted or sent, in bytes");
ABSL_FLAG(int64_t, max_streams, 1024,
          "Most Decode and Echo streams open at once, all clients together; "
          "past it a new stream ends RESOURCE_EXHAUSTED (0: unlimited)");
ABSL_FLAG(int64_t, max_steps_per_message, 1024,
          "Most entries in each of a Decode message's attach, steps and "
          "detach lists; a longer message ends its stream RESOURCE_EXHAUSTED, "
          "none of it run");
ABSL_FLAG(int64_t, max_steps_per_session_per_message, 16,
          "Most steps of one session in one Decode message; past it each of "
          "that session's steps is answered RESOURCE_EXHAUSTED, none run");
ABSL_FLAG(int32_t, step_workers, 0,
          "Threads the steps of one DecodeRequest run on, in parallel over "
          "its sessions (a session's own steps stay in order): the stream's "
          "own thread and N - 1 workers shared by every stream; 0: the CPUs "
          "this process may use (its affinity, lowered to the cgroup's CPU "
          "quota); 1: each message on its stream's thread; at most 1024");
ABSL_FLAG(int32_t, poll_threads, 1,
          "Threads that carry the API's gRPC calls, each polling its own "
          "completion queue (a call stays on the thread that accepted it); "
          "one is fastest for one stream, more spread many streams' reads "
          "and replies (docs/performance.md); at most 1024");
ABSL_FLAG(int32_t, max_shadows, 4,
          "Shadow policies a session may carry (0: shadowing is off); "
          "docs/choosing-a-policy.md");
ABSL_FLAG(int64_t, max_shadow_reference_bytes, int64_t{64} << 20,
          "Bytes of keys one session's shadowing may keep to score against");
ABSL_FLAG(int64_t, max_shadow_bytes, int64_t{1} << 30,
          "Bytes all sessions' shadowing may reserve together (0: unlimited)");
ABSL_FLAG(bool, enable_echo, false,
          "Serve the Echo RPC (entrokv-loadgen's transport baseline); off, "
          "Echo ends UNIMPLEMENTED");
ABSL_FLAG(int64_t, max_echo_bytes, int64_t{1} << 20,
          "Largest Echo reply payload, in bytes (0: up to the max message "
          "size)");
ABSL_FLAG(int64_t, grpc_memory_bytes, 0,
          "gRPC resource quota for its own buffers, in bytes (0: the larger "
          "of 1 GiB and 4 x --max_message_bytes; else at least 2 x "
          "--max_message_bytes)");
ABSL_FLAG(int32_t, grpc_max_threads, 16,
          "gRPC resource quota: threads for its synchronous services "
          "(reflection); at least 4");
ABSL_FLAG(absl::Duration, idle_timeout, absl::Minutes(5),
          "A session detached from every stream for this long is reclaimed");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(10),
          "On SIGTERM/SIGINT, how long open streams may continue");
ABSL_FLAG(bool, gpu, true, "Use the CUDA backend when a device is present");
ABSL_FLAG(int32_t, gpu_device, 0, "CUDA device ordinal");
ABSL_FLAG(std::string, metrics_listen, "",
          "HTTP address of the Prometheus metrics endpoint (GET /metrics): "
          "IPv4:port, localhost:port or :port (every interface); empty: off");

// Security, health port, socket permissions, log format (docs/security.md).
ABSL_FLAG(std::string, health_listen, "",
          "host:port of a health-only listener (plaintext grpc.health.v1, "
          "no token, nothing else), e.g. 0.0.0.0:8081 for Kubernetes probes; "
          "empty: none");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM server certificate (chain); with --tls_key every TCP API "
          "listener uses TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificate(s); set: clients must present a certificate "
          "signed by it (mutual TLS)");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding a bearer token (surrounding whitespace trimmed); "
          "every API call must then carry \"authorization: Bearer <token>\" "
          "or ends UNAUTHENTICATED (health checks exempt)");
ABSL_FLAG(bool, allow_insecure_tcp, false,
          "Allow a plaintext TCP API listener on a non-loopback address "
          "(anyone who reaches it can create, list and close sessions)");
ABSL_FLAG(bool, enable_reflection, false,
          "Serve gRPC server reflection (grpc.reflection.v1 and v1alpha) on "
          "the API listeners");
ABSL_FLAG(std::string, socket_mode, "0660",
          "Octal mode of each unix socket, set right after bind");
ABSL_FLAG(std::string, socket_group, "",
          "Group (name or gid) given each unix socket; empty: the server's");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one object per line (ts, level, msg, and session "
          "and step where relevant)");

namespace {

// protobuf reports some malformed client messages (a string that is not
// UTF-8) at ERROR on stderr; the service answers them INVALID_ARGUMENT, so
// here they are debug lines, and a client cannot flood the log with them.
void LogProtobuf(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  if (level >= google::protobuf::LOGLEVEL_FATAL) {
    spdlog::critical("protobuf {}:{}: {}", file, line, message);
  } else {
    spdlog::debug("protobuf {}:{}: {}", file, line, message);
  }
}

}  // namespace

int main(int argc, char** argv) {
  entrokv::ParseFlags(
      argc, argv,
      {.usage =
           "decides KV-cache evictions for LLM inference engines over gRPC.\n"
           "Usage: entrokv-server [--listen=ADDR,...] [flags]\n"
           "Exit status: 0 after a drain (SIGTERM, SIGINT), 1 when it cannot "
           "start, 2 on bad flags.",
       .source_dirs = {"server/"},
       .groups = {
           {"Listening",
            {"listen", "health_listen", "metrics_listen", "socket_mode",
             "socket_group", "enable_reflection", "enable_echo"}},
           {"Security (docs/security.md)",
            {"tls_cert", "tls_key", "tls_client_ca", "auth_token_file",
             "allow_insecure_tcp"}},
           {"Limits",
            {"max_sessions", "max_live_entries", "max_bytes", "max_gpu_bytes",
             "max_streams", "max_message_bytes", "max_steps_per_message",
             "max_steps_per_session_per_message", "max_echo_bytes",
             "grpc_memory_bytes", "grpc_max_threads", "max_shadows",
             "max_shadow_reference_bytes", "max_shadow_bytes"}},
           {"Threads", {"step_workers", "poll_threads"}},
           {"Lifetimes", {"idle_timeout", "drain_timeout"}},
           {"Backend", {"gpu", "gpu_device"}},
           {"Logging", {"log_level", "log_format"}},
       }});

  // Debian's Abseil is built with the Mutex deadlock detector on, which
  // keeps a lock graph on every lock and unlock (1.6% of a single stream's
  // server CPU, docs/performance.md). The tests keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  if (absl::Status status = entrokv::InitLogging(); !status.ok()) {
    std::fprintf(stderr, "entrokv-server: %s\n",
                 std::string(status.message()).c_str());
    return 2;
  }
  if (absl::Status status =
          entrokv::server::SetLogFormat(absl::GetFlag(FLAGS_log_format));
      !status.ok()) {
    std::fprintf(stderr, "entrokv-server: --%s\n",
                 std::string(status.message()).c_str());
    return 2;
  }
  google::protobuf::SetLogHandler(&LogProtobuf);

  // Signals are taken synchronously by this thread; block them before any
  // other thread (gRPC's) exists so that none of those receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  entrokv::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  options.max_live_entries = absl::GetFlag(FLAGS_max_live_entries);
  options.max_bytes = absl::GetFlag(FLAGS_max_bytes);
  options.max_gpu_bytes = absl::GetFlag(FLAGS_max_gpu_bytes);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_streams = absl::GetFlag(FLAGS_max_streams);
  options.max_steps_per_message = absl::GetFlag(FLAGS_max_steps_per_message);
  options.max_steps_per_session_per_message =
      absl::GetFlag(FLAGS_max_steps_per_session_per_message);
  options.step_workers = absl::GetFlag(FLAGS_step_workers);
  options.poll_threads = absl::GetFlag(FLAGS_poll_threads);
  options.max_shadows = absl::GetFlag(FLAGS_max_shadows);
  options.max_shadow_reference_bytes =
      absl::GetFlag(FLAGS_max_shadow_reference_bytes);
  options.max_shadow_bytes = absl::GetFlag(FLAGS_max_shadow_bytes);
  options.enable_echo = absl::GetFlag(FLAGS_enable_echo);
  options.max_echo_bytes = absl::GetFlag(FLAGS_max_echo_bytes);
  options.grpc_memory_bytes = absl::GetFlag(FLAGS_grpc_memory_bytes);
  options.grpc_max_threads = absl::GetFlag(FLAGS_grpc_max_threads);
  options.idle_timeout = absl::GetFlag(FLAGS_idle_timeout);
  options.use_gpu = absl::GetFlag(FLAGS_gpu);
  options.gpu_device = absl::GetFlag(FLAGS_gpu_device);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  const absl::Duration drain = absl::GetFlag(FLAGS_drain_timeout);
  options.health_listen = absl::GetFlag(FLAGS_health_listen);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.allow_insecure_tcp = absl::GetFlag(FLAGS_allow_insecure_tcp);
  options.enable_reflection = absl::GetFlag(FLAGS_enable_reflection);
  options.socket_mode = absl::GetFlag(FLAGS_socket_mode);
  options.socket_group = absl::GetFlag(FLAGS_socket_group);

  absl::StatusOr<std::unique_ptr<entrokv::server::Server>> server =
      entrokv::server::Server::Start(options);
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    // A value the server rejects on its face (out of range, flags that
    // contradict each other) is a bad command line, as an unparseable one
    // is: 2. Valid flags that this machine refuses (an address it cannot
    // bind, a file it cannot read, a group that does not exist): 1.
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("received {}", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown(drain);
  server->reset();
  return 0;
}
