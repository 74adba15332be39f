#include "flags.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"

ABSL_FLAG(std::string, target, "unix:/run/entrokv/entrokv.sock",
          "Server target: unix:/path or host:port (the server's default "
          "listen address by default)");
ABSL_FLAG(std::string, mode, "both",
          "entrokv, echo, or both (interleaved); echo needs a server started "
          "with --enable_echo (without it, both runs entrokv alone and says "
          "so)");
ABSL_FLAG(std::string, client, "library",
          "Decode client: library (the default: entrokv::Session, as engines "
          "run it, on its sync stream), library-callback (entrokv::Session on "
          "the callback API) or sync (raw transport: generated stubs, a "
          "blocking stream per session, no client library)");
ABSL_FLAG(int32_t, sessions, 8,
          "Concurrent sessions (a thread each, or a thread per --batch)");
ABSL_FLAG(int32_t, prefill, 1024, "Entries appended before the decode steps");
ABSL_FLAG(int32_t, prefill_chunk, 256, "Entries per prefill message");
ABSL_FLAG(int32_t, rounds, 5,
          "Rounds; each runs every mode once (ignored with --duration)");
ABSL_FLAG(absl::Duration, duration, absl::ZeroDuration(),
          "Run rounds until this much time has passed since the sessions "
          "started (the round in progress finishes), e.g. 10m for a soak or "
          "a dashboard demo; 0: --rounds rounds");
ABSL_FLAG(int32_t, steps_per_round, 200,
          "Decode steps per session, mode and round");
ABSL_FLAG(double, rate, 0.0,
          "Open loop: steps/s over all sessions; 0: closed loop");
ABSL_FLAG(std::string, shape, "default",
          "default, or 8b: the Llama-3-8B preset (the 4 layers sent of 32, "
          "8 kv heads, 32 q heads, head_dim 128, f16, --sketch=project:16, "
          "--query_form=group_sum, --decide_every=16), for each of those "
          "flags not given on the command line");
ABSL_FLAG(int32_t, layers, 4, "Layers sent per step");
ABSL_FLAG(int32_t, kv_heads, 2, "KV heads");
ABSL_FLAG(int32_t, q_heads, 8, "Query heads");
ABSL_FLAG(int32_t, head_dim, 64, "Head dimension");
ABSL_FLAG(std::string, dtype, "f16", "Element type: f32, f16 or bf16");
ABSL_FLAG(std::string, policy, "entropy",
          "Policy: a ranking, RANKING+CONTROL, or entropy");
ABSL_FLAG(int64_t, budget, 1024, "Live entries budget");
ABSL_FLAG(int32_t, block_size, 1, "1: tokens; N: blocks of N tokens");
ABSL_FLAG(std::string, placement, "cpu", "cpu, gpu or auto");
ABSL_FLAG(uint64_t, seed, 1, "Synthetic stream seed (session i uses seed+i)");
ABSL_FLAG(int32_t, pool, 64, "Distinct decode steps generated per session");
ABSL_FLAG(absl::Duration, step_deadline, absl::Seconds(10),
          "--client=library: per-step deadline");
ABSL_FLAG(absl::Duration, create_deadline, absl::Seconds(5),
          "--client=library: deadline of a session's creation (its attach "
          "included) and of its close");
ABSL_FLAG(int32_t, batch, 1,
          "Sessions per DecodeBatch: each thread steps N sessions with one "
          "message per decode step (client library); Echo then sends one "
          "message of the same bytes. 1: one stream per session");
ABSL_FLAG(std::string, batch_calls, "batch",
          "With --batch > 1, how a thread steps its sessions: batch "
          "(DecodeBatch::Step, the whole batch in one call), session (each "
          "session's StepAsync, then each one's Collect: the library gathers "
          "them into one message) or pipelined (as session, but each "
          "decode step's message is sent before the previous one's answers "
          "are collected: two messages in flight, evictions applied one step "
          "late)");
ABSL_FLAG(std::string, sketch, "exact",
          "exact or project:R (client library only: it projects)");
ABSL_FLAG(std::string, query_form, "per_head",
          "per_head or group_sum (client library only)");
ABSL_FLAG(int32_t, decide_every, 1, "Decision cadence K");
ABSL_FLAG(bool, block_summary, false,
          "One state per block (needs --block_size >= 2)");
ABSL_FLAG(std::vector<std::string>, shadows, {},
          "Shadow policies the server runs beside each session's own, "
          "comma-separated, each POLICY or POLICY@BUDGET (default budget: "
          "--budget), e.g. h2o,tova@512; the report gains a table of "
          "policies (docs/choosing-a-policy.md). Needs --client=library*");
ABSL_FLAG(int32_t, shadow_score_every, 1,
          "With --shadows: score one step with queries in every N");
ABSL_FLAG(int64_t, shadow_reference_entries, 0,
          "With --shadows: keys the server keeps to score against (0: as "
          "many as its --max_shadow_reference_bytes holds)");
ABSL_FLAG(int32_t, server_pid, 0,
          "The server's pid, whose CPU time and context switches (from "
          "/proc, on this host) the report gives per step for each mode; 0: "
          "the process that listens on a unix: --target; -1: none");
ABSL_FLAG(bool, json, false, "Print the report as JSON");
ABSL_FLAG(bool, progress, true, "Progress bar on stderr");
ABSL_FLAG(absl::Duration, sync_timeout, absl::Seconds(10),
          "A round trip (or the close) of a blocking Decode or Echo stream "
          "that takes longer than this cancels the stream; its step counts "
          "as DEADLINE_EXCEEDED and the stream's later steps as not sent (a "
          "stopped server must not hang the run)");
ABSL_FLAG(std::string, tls_root_certs, "",
          "PEM file of the CA(s) that sign the server's certificate: connect "
          "with TLS (empty: plaintext)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate for a mutual-TLS server (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM key of --tls_cert");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the bearer token a server started with "
          "--auth_token_file requires (sent as authorization: Bearer ...)");
ABSL_FLAG(bool, fail_on_error, false,
          "Exit 1 when any step was not answered OK by the server (rejected, "
          "lost with its stream, not sent after its stream ended, or decided "
          "locally by the client library), a session failed to start or a "
          "session close failed. Without it the exit code is 0 whenever the "
          "run completes, failures or not: they are counted by status code "
          "in the report. Bad flags exit 2 either way");

namespace entrokv::loadgen {
namespace {

// The whole content of `path`, or an error naming `flag`.
absl::StatusOr<std::string> ReadFlagFile(const char* flag,
                                         const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot read ", path));
  }
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// `flag`'s value; with a preset, `preset` unless the command line gave it.
template <typename T>
T FlagOrPreset(const absl::Flag<T>& flag, bool use_preset, T preset) {
  if (use_preset && !absl::flags_internal::WasPresentOnCommandLine(
                        absl::GetFlagReflectionHandle(flag).Name())) {
    return preset;
  }
  return absl::GetFlag(flag);
}

// The model layers of --shape=8b, of which the default scored layers are sent.
constexpr int32_t k8bModelLayers = 32;

// The session's shape, policy and cadence flags as a checked SessionConfig.
absl::StatusOr<SessionConfig> SessionConfigFromFlags() {
  const std::string preset = absl::GetFlag(FLAGS_shape);
  if (preset != "default" && preset != "8b") {
    return absl::InvalidArgumentError("--shape: default or 8b");
  }
  const bool b8 = preset == "8b";
  const std::vector<int32_t> scored = DefaultScoredLayers(k8bModelLayers);
  SessionConfig config;
  config.shape.layers = FlagOrPreset(FLAGS_layers, b8,
                                     static_cast<int32_t>(scored.size()));
  if (b8 && config.shape.layers == static_cast<int32_t>(scored.size())) {
    config.scored_layers = scored;
  }
  config.shape.kv_heads = FlagOrPreset(FLAGS_kv_heads, b8, 8);
  config.shape.q_heads = FlagOrPreset(FLAGS_q_heads, b8, 32);
  config.shape.head_dim = FlagOrPreset(FLAGS_head_dim, b8, 128);
  if (!ParseElementType(FlagOrPreset(FLAGS_dtype, b8, std::string("f16")),
                        &config.shape.element_type)) {
    return absl::InvalidArgumentError("--dtype: unknown element type");
  }
  config.budget = absl::GetFlag(FLAGS_budget);
  config.block_size = absl::GetFlag(FLAGS_block_size);
  config.block_summary = absl::GetFlag(FLAGS_block_summary);
  config.decide_every = FlagOrPreset(FLAGS_decide_every, b8, 16);
  if (absl::Status sketch = ApplySketchName(
          FlagOrPreset(FLAGS_sketch, b8, std::string("project:16")),
          &config.shape);
      !sketch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", sketch.ToString()));
  }
  if (!ParseQueryForm(
          FlagOrPreset(FLAGS_query_form, b8, std::string("group_sum")),
          &config.shape.query_form)) {
    return absl::InvalidArgumentError("--query_form: per_head or group_sum");
  }
  if (!ParsePlacement(absl::GetFlag(FLAGS_placement), &config.placement)) {
    return absl::InvalidArgumentError("--placement: unknown placement");
  }
  absl::Status status = ApplyPolicyName(absl::GetFlag(FLAGS_policy), &config);
  if (status.ok()) status = ValidateSessionConfig(config);
  if (!status.ok()) return absl::InvalidArgumentError(status.ToString());
  return config;
}

// --shadows and its companions as the library sessions' ShadowRequest.
absl::Status ApplyShadowFlags(Options* options) {
  ShadowRequest& request = options->session_options.shadowing;
  for (const std::string& item : absl::GetFlag(FLAGS_shadows)) {
    if (item.empty()) continue;
    SessionConfig shadow = options->config;
    std::string name = item;
    if (const size_t at = item.find('@'); at != std::string::npos) {
      name = item.substr(0, at);
      if (!absl::SimpleAtoi(item.substr(at + 1), &shadow.budget)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--shadows: \"", item, "\": the budget after @ is not an integer"));
      }
    }
    absl::Status status = ApplyPolicyName(name, &shadow);
    if (status.ok()) status = ValidateSessionConfig(shadow);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shadows: \"", item, "\": ", status.message()));
    }
    request.policies.push_back(shadow);
  }
  request.score_every = absl::GetFlag(FLAGS_shadow_score_every);
  request.max_reference_entries = absl::GetFlag(FLAGS_shadow_reference_entries);
  if (request.empty()) return absl::OkStatus();
  if (!options->UsesLibrary()) {
    return absl::InvalidArgumentError(
        "--shadows needs the client library: add --client=library");
  }
  if (request.score_every < 1 || request.max_reference_entries < 0) {
    return absl::InvalidArgumentError(
        "--shadow_score_every must be >= 1 and --shadow_reference_entries "
        ">= 0");
  }
  return absl::OkStatus();
}

// The counts and the rate. A value out of range is refused (exit 2), never
// raised to the nearest valid one.
absl::Status ApplyCountFlags(Options* options) {
  const struct {
    const absl::Flag<int32_t>& flag;
    int32_t min;
    int* out;
  } counts[] = {
      {FLAGS_sessions, 1, &options->sessions},
      {FLAGS_batch, 1, &options->batch},
      {FLAGS_rounds, 1, &options->rounds},
      {FLAGS_steps_per_round, 1, &options->steps_per_round},
      {FLAGS_prefill, 0, &options->prefill},
      {FLAGS_prefill_chunk, 1, &options->prefill_chunk},
      {FLAGS_pool, 1, &options->pool},
      {FLAGS_server_pid, -1, &options->server_pid},
  };
  for (const auto& count : counts) {
    const int32_t value = absl::GetFlag(count.flag);
    if (value < count.min) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--%s %d: must be at least %d",
          absl::GetFlagReflectionHandle(count.flag).Name(), value, count.min));
    }
    *count.out = value;
  }
  options->rate = absl::GetFlag(FLAGS_rate);
  if (!(options->rate >= 0) || std::isinf(options->rate)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--rate %g: must be a finite number of steps/s, or 0", options->rate));
  }
  return absl::OkStatus();
}

// The modes, the client and the number of threads (after the counts).
absl::Status ApplyLoadFlags(Options* options) {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "both") {
    options->modes = {"entrokv", "echo"};
  } else if (mode == "entrokv" || mode == "echo") {
    options->modes = {mode};
  } else {
    return absl::InvalidArgumentError("--mode: entrokv, echo or both");
  }
  options->client = absl::GetFlag(FLAGS_client);
  if (options->client != "sync" && options->client != "library" &&
      options->client != "library-callback") {
    return absl::InvalidArgumentError(
        "--client: sync, library or library-callback");
  }
  const Shape& shape = options->config.shape;
  if (!options->UsesLibrary() && (options->batch > 1 || shape.sketch_dim > 0 ||
                                  shape.query_form != QueryForm::kPerHead)) {
    return absl::InvalidArgumentError(
        "--batch, --sketch and --query_form=group_sum need the client "
        "library: add --client=library");
  }
  options->batch_calls = absl::GetFlag(FLAGS_batch_calls);
  if (options->batch_calls != "batch" && options->batch_calls != "session" &&
      options->batch_calls != "pipelined") {
    return absl::InvalidArgumentError(
        "--batch_calls: batch, session or pipelined");
  }
  if (options->sessions % options->batch != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--sessions %d is not a multiple of --batch %d",
                        options->sessions, options->batch));
  }
  options->threads = options->sessions / options->batch;
  options->duration = absl::GetFlag(FLAGS_duration);
  if (options->duration < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--duration %s: must not be negative",
                        absl::FormatDuration(options->duration)));
  }
  return absl::OkStatus();
}

// The channel every mode uses (ClientOptions) and the library's sessions.
absl::Status ApplyConnectionFlags(Options* options) {
  ClientOptions& client = options->client_options;
  client.target = absl::GetFlag(FLAGS_target);
  client.max_message_bytes = 256 << 20;
  client.tls_root_certs_file = absl::GetFlag(FLAGS_tls_root_certs);
  client.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  client.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  if (const std::string file = absl::GetFlag(FLAGS_auth_token_file);
      !file.empty()) {
    absl::StatusOr<std::string> token = ReadFlagFile("auth_token_file", file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(token.status().ToString());
    }
    client.bearer_token = std::string(absl::StripAsciiWhitespace(*token));
  }
  SessionOptions& session = options->session_options;
  session.step_deadline = absl::GetFlag(FLAGS_step_deadline);
  session.create_deadline = absl::GetFlag(FLAGS_create_deadline);
  session.offline_when_unavailable = false;
  session.stream_api = options->client == "library-callback"
                           ? StreamApi::kCallback
                           : StreamApi::kSync;
  options->sync_timeout = absl::GetFlag(FLAGS_sync_timeout);
  return absl::OkStatus();
}

}  // namespace

void ParseCommandLine(int argc, char** argv) {
  entrokv::ParseFlags(
      argc, argv,
      {.usage =
           "Load test for entrokv-server: N synthetic sessions, decode-step "
           "latency and throughput side by side with the Echo baseline.\n"
           "  entrokv-loadgen --target=unix:/tmp/entrokv.sock --sessions=64\n"
           "Exit status: 0 when the run completes, 1 on failures with "
           "--fail_on_error, 2 on bad flags.",
       .source_dirs = {"tools/loadgen/"},
       .groups = {
           {"Server",
            {"target", "tls_root_certs", "tls_cert", "tls_key",
             "auth_token_file"}},
           {"Load",
            {"mode", "client", "sessions", "batch", "batch_calls", "rounds",
             "steps_per_round",
             "duration", "rate", "prefill", "prefill_chunk", "pool", "seed"}},
           {"Session shape and policy",
            {"shape", "layers", "kv_heads", "q_heads", "head_dim", "dtype",
             "policy",
             "budget", "block_size", "block_summary", "placement", "sketch",
             "query_form", "decide_every"}},
           {"Shadow policies",
            {"shadows", "shadow_score_every", "shadow_reference_entries"}},
           {"Deadlines", {"step_deadline", "create_deadline", "sync_timeout"}},
           {"Output",
            {"json", "progress", "fail_on_error", "server_pid", "log_level"}},
       }});
}

absl::StatusOr<Options> OptionsFromFlags() {
  Options options;
  absl::StatusOr<SessionConfig> config = SessionConfigFromFlags();
  if (!config.ok()) return config.status();
  options.config = *std::move(config);
  if (absl::Status counts = ApplyCountFlags(&options); !counts.ok()) {
    return counts;
  }
  if (absl::Status load = ApplyLoadFlags(&options); !load.ok()) return load;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.json = absl::GetFlag(FLAGS_json);
  options.progress = absl::GetFlag(FLAGS_progress);
  options.fail_on_error = absl::GetFlag(FLAGS_fail_on_error);
  if (absl::Status connection = ApplyConnectionFlags(&options);
      !connection.ok()) {
    return connection;
  }
  if (absl::Status shadows = ApplyShadowFlags(&options); !shadows.ok()) {
    return shadows;
  }
  return options;
}

}  // namespace entrokv::loadgen
