// entrokv-server: the entrokv gRPC sidecar.
//
// Parses flags, starts the server, waits for SIGTERM or SIGINT, then drains
// (health NOT_SERVING, open streams may finish until --drain_timeout) and
// exits 0.

#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::vector<std::string>, listen, {"127.0.0.1:50051"},
          "Comma-separated listen addresses: host:port (port 0 picks one) "
          "and/or unix:/path/to.sock");
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
ABSL_FLAG(absl::Duration, idle_timeout, absl::Minutes(5),
          "A session detached from every stream for this long is reclaimed");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(10),
          "On SIGTERM/SIGINT, how long open streams may continue");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error, critical or off");
ABSL_FLAG(bool, gpu, true, "Use the CUDA backend when a device is present");
ABSL_FLAG(int32_t, gpu_device, 0, "CUDA device ordinal");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "decides KV-cache evictions for LLM inference engines "
      "over gRPC.\nUsage: entrokv-server [--listen=ADDR,...] [flags]");
  absl::FlagsUsageConfig usage_config;
  // --help lists this binary's flags (not only those of a file named after it).
  usage_config.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "server/main.cc");
  };
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);

  const std::string level_name = absl::GetFlag(FLAGS_log_level);
  const spdlog::level::level_enum level = spdlog::level::from_str(level_name);
  if (level == spdlog::level::off && level_name != "off") {
    std::fprintf(stderr, "--log_level: unknown level \"%s\"\n",
                 level_name.c_str());
    return 2;
  }
  spdlog::set_level(level);

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
  options.idle_timeout = absl::GetFlag(FLAGS_idle_timeout);
  options.use_gpu = absl::GetFlag(FLAGS_gpu);
  options.gpu_device = absl::GetFlag(FLAGS_gpu_device);
  const absl::Duration drain = absl::GetFlag(FLAGS_drain_timeout);

  absl::StatusOr<std::unique_ptr<entrokv::server::Server>> server =
      entrokv::server::Server::Start(options);
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    return 1;
  }

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("received {}", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown(drain);
  server->reset();
  return 0;
}
