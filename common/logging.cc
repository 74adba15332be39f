#include "common/logging.h"

#include <cstring>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "grpc/support/log.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error, critical or off");

namespace entrokv {
namespace {

void LogGrpc(gpr_log_func_args* args) {
  const char* file = args->file != nullptr ? args->file : "";
  if (const char* slash = std::strrchr(file, '/'); slash != nullptr) {
    file = slash + 1;
  }
  switch (args->severity) {
    case GPR_LOG_SEVERITY_ERROR:
      spdlog::warn("grpc {}:{}: {}", file, args->line, args->message);
      break;
    case GPR_LOG_SEVERITY_INFO:
    case GPR_LOG_SEVERITY_DEBUG:
      spdlog::debug("grpc {}:{}: {}", file, args->line, args->message);
      break;
  }
}

}  // namespace

absl::Status InitLogging(LogStream to) {
  const std::string name = absl::GetFlag(FLAGS_log_level);
  const spdlog::level::level_enum level = spdlog::level::from_str(name);
  // from_str() answers "off" for a name it does not know.
  if (level == spdlog::level::off && name != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log_level: unknown level \"", name,
        "\"; want trace, debug, info, warn, error, critical or off"));
  }
  if (to == LogStream::kStderr) {
    spdlog::set_default_logger(spdlog::stderr_color_mt("entrokv"));
  }
  spdlog::set_level(level);
  // gRPC filters by its own verbosity (GRPC_VERBOSITY, default ERROR)
  // before calling the function; at debug and below let its info and debug
  // lines through too.
  if (level <= spdlog::level::debug) {
    gpr_set_log_verbosity(GPR_LOG_SEVERITY_DEBUG);
  }
  gpr_set_log_function(&LogGrpc);
  return absl::OkStatus();
}

}  // namespace entrokv
