#include "run.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "entrokv/client/client.h"
#include "entrokv/client/raw_transport.h"
#include "entrokv/core/element_type.h"
#include "grpcpp/grpcpp.h"
#include "phases.h"
#include "report.h"
#include "runner.h"
#include "server_process.h"
#include "spdlog/spdlog.h"
#include "sync_stream.h"
#include "workload.h"

namespace entrokv::loadgen {
namespace {

// `status` (of the library's channel) naming the flags that set the
// ClientOptions fields it names.
absl::Status InFlagNames(const absl::Status& status) {
  return absl::Status(
      status.code(),
      absl::StrReplaceAll(status.message(),
                          {{"tls_root_certs_file", "--tls_root_certs"},
                           {"tls_cert_file", "--tls_cert"},
                           {"tls_key_file", "--tls_key"}}));
}

// The stub over the library's channel (Echo, and Decode with
// --client=sync) and, for --client=library*, the library's Client. Neither
// waits for the server: they fail only on options, i.e. on flags.
absl::Status Connect(Shared* shared) {
  const Options& options = shared->options;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateChannel(options.client_options);
  if (!channel.ok()) return InFlagNames(channel.status());
  shared->stub =
      std::shared_ptr<v1::EntroKv::Stub>(v1::EntroKv::NewStub(*channel));
  if (options.UsesLibrary()) {
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect(options.client_options);
    if (!client.ok()) return InFlagNames(client.status());
    shared->client = *std::move(client);
  }
  return absl::OkStatus();
}

// Drops echo from the modes, saying so, when the server does not serve it.
void DropEchoUnlessServed(Shared* shared) {
  const absl::Status echo = ProbeEcho(shared->stub.get());
  if (!absl::IsUnimplemented(echo) && !absl::IsFailedPrecondition(echo)) {
    return;
  }
  spdlog::warn("the server does not serve Echo: {}{}", echo.ToString(),
               absl::StrContains(echo.message(), "--enable_echo")
                   ? ""
                   : " (entrokv-server serves Echo only with --enable_echo)");
  shared->modes.erase(
      std::find(shared->modes.begin(), shared->modes.end(), "echo"));
  if (!shared->modes.empty()) {
    spdlog::warn("running without the echo baseline");
  }
}

// Sets shared->server_pid when the server's process counters can be read
// from here: --server_pid, else the peer of a unix: target.
void FindServerProcess(Shared* shared) {
  const Options& options = shared->options;
  if (options.server_pid < 0) return;
  const std::optional<int> pid =
      options.server_pid > 0
          ? std::optional<int>(options.server_pid)
          : PeerPidOfTarget(options.client_options.target);
  if (!pid.has_value()) {
    spdlog::info(
        "the server's CPU and context switches are not reported: its pid is "
        "unknown (give --server_pid, or a unix: target)");
    return;
  }
  if (!SampleProcess(*pid).has_value()) {
    spdlog::warn("--server_pid {}: /proc/{} cannot be read from here; the "
                 "server's CPU and context switches are not reported",
                 *pid, *pid);
    return;
  }
  shared->server_pid = pid;
}

// Every session's synthetic data, session i's from seed + i, generated on
// as many threads as the machine has (the streams are independent, so the
// data is the same on any number): at the 8B shape a session's prefill is
// millions of Gaussian draws.
std::vector<SessionData> MakeAllData(const Options& options) {
  const int n = options.threads * options.batch;
  std::vector<SessionData> data(n);
  std::atomic<int> next{0};
  const auto work = [&] {
    for (int i = next++; i < n; i = next++) {
      data[i] = MakeData(options.config, options.prefill, options.prefill_chunk,
                         options.pool, options.seed + i);
    }
  };
  const int workers =
      std::min<int>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) threads.emplace_back(work);
  work();
  for (std::thread& thread : threads) thread.join();
  return data;
}

// A runner per thread: a session each, or --batch sessions each.
std::vector<std::unique_ptr<Runner>> MakeRunners(Shared* shared) {
  const Options& options = shared->options;
  std::vector<SessionData> all = MakeAllData(options);
  std::vector<std::unique_ptr<Runner>> runners;
  for (int t = 0; t < options.threads; ++t) {
    std::vector<SessionData> data;
    for (int j = 0; j < options.batch; ++j) {
      data.push_back(std::move(all[t * options.batch + j]));
    }
    if (options.batch > 1) {
      runners.push_back(CreateBatchRunner(shared, std::move(data)));
    } else if (options.UsesLibrary()) {
      runners.push_back(CreateLibraryRunner(shared, std::move(data[0])));
    } else {
      runners.push_back(CreateSyncRunner(shared, std::move(data[0])));
    }
  }
  return runners;
}

// Counts the runners that failed to start, logging the first.
void CountNotStarted(const PhaseLog& log, Shared* shared)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) {
  const Options& options = shared->options;
  const bool batches = options.batch > 1;
  int failed = 0;
  for (size_t i = 0; i < log.setup_status.size(); ++i) {
    const absl::Status& status = log.setup_status[i];
    if (status.ok()) continue;
    if (failed++ == 0) {
      spdlog::error("{} {}: {}", batches ? "batch" : "session", i,
                    status.ToString());
    }
    shared->failures.sessions_not_started[CodeName(status.code())] +=
        options.batch;
  }
  if (failed > 0) {
    spdlog::error("{} of {} {} failed to start", failed, options.threads,
                  batches ? "batches" : "sessions");
  }
}

RunDescription Describe(const Options& options, const PhaseLog& log,
                        size_t modes_per_round) {
  const SessionConfig& config = options.config;
  RunDescription run;
  run.target = options.client_options.target;
  run.shape = absl::StrFormat("layers=%d kv_heads=%d q_heads=%d head_dim=%d %s",
                              config.shape.layers, config.shape.kv_heads,
                              config.shape.q_heads, config.shape.head_dim,
                              ElementTypeName(config.shape.element_type));
  if (config.shape.sketch_dim > 0) {
    absl::StrAppendFormat(&run.shape, " sketch=project:%d",
                          config.shape.sketch_dim);
  }
  if (config.shape.query_form == QueryForm::kGroupSum) {
    absl::StrAppend(&run.shape, " query_form=group_sum");
  }
  if (config.decide_every > 1) {
    absl::StrAppendFormat(&run.shape, " decide_every=%d", config.decide_every);
  }
  run.policy = PolicyName(config);
  run.budget = config.budget;
  run.sessions = options.sessions;
  run.prefill = options.prefill;
  run.rounds = static_cast<int>(log.modes.size() / modes_per_round);
  run.steps_per_round = options.steps_per_round;
  run.rate = options.rate;
  run.client = options.client;
  run.batch = options.batch;
  run.batch_calls = options.batch_calls;
  run.planned_steps = int64_t{options.sessions} * options.steps_per_round *
                      static_cast<int64_t>(log.modes.size());
  run.request_bytes = DecodeRequestBytes(config);
  return run;
}

// Prints the report and returns the exit code.
int Report(const PhaseLog& log, Shared* shared) {
  const Options& options = shared->options;
  absl::MutexLock lock(&shared->mu);
  CountNotStarted(log, shared);
  for (size_t p = 0; p < log.ends.size(); ++p) {
    shared->stats[log.modes[p]].wall_seconds +=
        absl::ToDoubleSeconds(log.ends[p] - log.starts[p]);
  }
  RunDescription run = Describe(options, log, shared->modes.size());
  run.policies = SummarizePolicies(shared->shadows);
  run.server_pid = shared->server_pid.value_or(0);
  const std::string report =
      options.json ? FormatJson(run, shared->stats, shared->failures)
                   : FormatText(run, shared->stats, shared->failures);
  std::fputs(report.c_str(), stdout);
  std::fflush(stdout);
  if (options.fail_on_error && AnyFailure(shared->stats, shared->failures)) {
    std::fprintf(stderr,
                 "entrokv-loadgen: failures (see the report); exit 1 "
                 "(--fail_on_error)\n");
    return 1;
  }
  return 0;
}

}  // namespace

int Run(const Options& options) {
  Shared shared(options);
  shared.modes = options.modes;
  if (absl::Status connected = Connect(&shared); !connected.ok()) {
    std::fprintf(stderr, "%s\n", connected.ToString().c_str());
    return 2;
  }
  if (shared.RunsEcho()) {
    DropEchoUnlessServed(&shared);
    if (shared.modes.empty()) return 1;
  }
  shared.echo_reply_bytes = TypicalResultBytes(options.config);
  FindServerProcess(&shared);
  const std::vector<std::unique_ptr<Runner>> runners = MakeRunners(&shared);
  const PhaseLog log = RunPhases(&shared, runners);
  return Report(log, &shared);
}

}  // namespace entrokv::loadgen
