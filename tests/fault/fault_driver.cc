// entrokv-fault-driver: an engine that keeps decoding through a sidecar
// outage, for tests/fault/recovery_fault.py (docs/engines.md, "Recovery after
// an outage"). It is the C++ twin of fault_driver.py: same flags, same
// output, so that one fault script measures the C++ single-stream, the C++
// batched and the Python paths alike.
//
//   entrokv-fault-driver --target=unix:/path.sock --mode=single|batch
//                        [--sessions=4] [--step_every_ms=10]
//                        [--probe_every_ms=100] [--duration_s=60]
//
// Every step_every_ms it steps `sessions` long-lived sessions (one Step each,
// or one DecodeBatch::Step for all of them), each with a live_keys callback
// over the keys it appended. The first tick that finds every one of them
// degraded (the outage has begun) creates one more, "born" during the outage
// (offline), that steps with them from then on. Every probe_every_ms it
// creates a short-lived "probe" session, steps it once and closes it (in
// batch mode the probe is a session of the batch, stepped with the others).
// It stops when stdin closes or duration_s has passed. --sessions=0: probes
// only; --probe_every_ms=0: no probes (the script runs one driver of each,
// so that nothing but its own creations makes the probes' channel
// reconnect).
//
// Output, one JSON object per line on stdout, times in seconds of
// CLOCK_MONOTONIC (the clock of the script's time.monotonic()):
//   {"ev":"ready","t":...}  every long-lived session is online
//   {"ev":"step","t":...,"who":"old0","server":true}  a session's first step,
//       and every change between server-decided and local
//   {"ev":"probe","t":...,"online":true,"server":true}  a probe: created at
//       t, online when created, its step decided by the server
//   {"ev":"end","t":...,"recoveries":N,"attempts":N,"steps":N}
// Exit status 0, or 2 for bad flags.

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "entrokv/client/batch.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "entrokv/core/config.h"
#include "testing/engine_cache.h"

namespace entrokv {
namespace {

double Monotonic() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * now.tv_nsec;
}

// A time for the output: microseconds, whatever its magnitude (StrCat of a
// double keeps only six significant digits).
std::string Seconds(double t) { return absl::StrFormat("%.6f", t); }

void Emit(const std::string& json) {
  std::fputs(json.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

struct Flags {
  std::string target;
  std::string mode = "single";
  int sessions = 4;
  int step_every_ms = 10;
  int probe_every_ms = 100;
  int duration_s = 60;
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (!absl::StartsWith(arg, "--") || eq == std::string::npos) return false;
    const std::string name = arg.substr(2, eq - 2);
    const std::string value = arg.substr(eq + 1);
    int* number = name == "sessions"         ? &flags->sessions
                  : name == "step_every_ms"  ? &flags->step_every_ms
                  : name == "probe_every_ms" ? &flags->probe_every_ms
                  : name == "duration_s"     ? &flags->duration_s
                                             : nullptr;
    if (name == "target") {
      flags->target = value;
    } else if (name == "mode" && (value == "single" || value == "batch")) {
      flags->mode = value;
    } else if (number == nullptr || !absl::SimpleAtoi(value, number) ||
               *number < (number == &flags->sessions ||
                                  number == &flags->probe_every_ms
                              ? 0
                              : 1)) {
      return false;
    }
  }
  return !flags->target.empty();
}

// The shape of every session: small, f32 (exact on the wire).
SessionConfig Config() {
  SessionConfig config;
  config.shape.layers = 2;
  config.shape.kv_heads = 2;
  config.shape.q_heads = 4;
  config.shape.head_dim = 8;
  config.shape.element_type = ElementType::kF32;
  config.budget = 16;
  config.protection.sinks = 1;
  if (!ApplyPolicyName("tova", &config).ok()) std::abort();
  return config;
}

// One sequence: its session, the keys of what it appended (the engine's KV
// cache, for live_keys) and whether its last step was server-decided.
class Sequence {
 public:
  explicit Sequence(std::string name) : name_(std::move(name)) {
    const Shape& s = config_.shape;
    key_elements_ = s.layers * s.kv_heads * s.head_dim;
    queries_.assign(s.layers * s.q_heads * s.head_dim, 0.25f);
    options_.live_keys = [this](absl::Span<const uint64_t> slots,
                                std::vector<float>* keys) {
      return testing::GatherKeys(keys_, slots, keys);
    };
  }

  const SessionConfig& config() const { return config_; }
  const SessionOptions& options() const { return options_; }
  void set_session(std::unique_ptr<Session> session) {
    session_ = std::move(session);
  }
  Session* session() { return session_.get(); }

  // The next step's request (valid until the next call).
  StepRequest Next() {
    slot_ = next_slot_++;
    std::vector<float>& key = keys_[slot_];
    key.resize(key_elements_);
    for (int64_t e = 0; e < key_elements_; ++e) {
      key[e] = static_cast<float>((slot_ * 7 + e * 3) % 11) * 0.125f - 0.5f;
    }
    StepRequest request;
    request.slot_ids = {&slot_, 1};
    request.keys = VectorView::F32(key);
    request.queries = VectorView::F32(queries_);
    return request;
  }

  // Applies an outcome: frees the evicted slots; reports a change between
  // server-decided and local.
  void Settle(const absl::StatusOr<StepOutcome>& outcome) {
    if (!outcome.ok()) {
      Emit(absl::StrCat(R"({"ev":"error","t":)", Seconds(Monotonic()), R"(,"who":")",
                        name_, R"(","status":")", outcome.status().code(),
                        "\"}"));
      keys_.erase(slot_);
      return;
    }
    for (uint64_t slot : outcome->evicted) keys_.erase(slot);
    const bool server = !outcome->fallback;
    if (!server_.has_value() || *server_ != server) {
      Emit(absl::StrCat(R"({"ev":"step","t":)", Seconds(Monotonic()), R"(,"who":")",
                        name_, R"(","server":)", server ? "true" : "false",
                        "}"));
    }
    server_ = server;
  }

  bool online() const { return session_ != nullptr && !session_->degraded(); }

 private:
  std::string name_;
  SessionConfig config_ = Config();
  SessionOptions options_;
  int64_t key_elements_ = 0;
  std::vector<float> queries_;
  testing::EngineCache keys_;
  uint64_t next_slot_ = 0;
  uint64_t slot_ = 0;
  std::optional<bool> server_;
  std::unique_ptr<Session> session_;
};

// True once stdin is closed (the script's signal to stop).
bool StdinClosed() {
  pollfd fd{0, POLLIN, 0};
  if (poll(&fd, 1, 0) <= 0) return false;
  char buffer[64];
  return read(0, buffer, sizeof(buffer)) <= 0;
}

int Run(const Flags& flags) {
  ClientOptions client_options;
  client_options.target = flags.target;
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "fault-driver: %s\n",
                 client.status().ToString().c_str());
    return 2;
  }
  const bool batched = flags.mode == "batch";
  std::unique_ptr<DecodeBatch> batch =
      batched ? (*client)->CreateBatch() : nullptr;
  auto create = [&](Sequence* sequence) {
    absl::StatusOr<std::unique_ptr<Session>> session =
        batched ? batch->CreateSession(sequence->config(), sequence->options())
                : (*client)->CreateSession(sequence->config(),
                                           sequence->options());
    if (!session.ok()) {
      std::fprintf(stderr, "fault-driver: %s\n",
                   session.status().ToString().c_str());
      std::exit(1);
    }
    sequence->set_session(*std::move(session));
  };

  std::vector<std::unique_ptr<Sequence>> sequences;
  for (int i = 0; i < flags.sessions; ++i) {
    sequences.push_back(std::make_unique<Sequence>(absl::StrCat("old", i)));
    create(sequences.back().get());
  }
  bool ready = false;
  bool born = false;
  const absl::Duration every = absl::Milliseconds(flags.step_every_ms);
  const absl::Duration probe_every = absl::Milliseconds(flags.probe_every_ms);
  const absl::Time end = absl::Now() + absl::Seconds(flags.duration_s);
  absl::Time next_probe = absl::Now();
  int64_t probes = 0;
  for (absl::Time tick = absl::Now(); absl::Now() < end; tick += every) {
    if (StdinClosed()) break;
    absl::SleepFor(tick - absl::Now());
    // A probe: a new sequence, stepped once with the others, then closed.
    std::unique_ptr<Sequence> probe;
    double probe_created = 0;
    bool probe_online = false;
    if (ready && flags.probe_every_ms > 0 && absl::Now() >= next_probe) {
      next_probe = absl::Now() + probe_every;
      probe = std::make_unique<Sequence>(absl::StrCat("probe", probes++));
      probe_created = Monotonic();
      create(probe.get());
      probe_online = probe->online();
    }
    std::vector<Sequence*> stepping;
    for (auto& s : sequences) stepping.push_back(s.get());
    if (probe != nullptr) stepping.push_back(probe.get());
    std::vector<StepRequest> requests;
    for (Sequence* s : stepping) requests.push_back(s->Next());
    std::vector<absl::StatusOr<StepOutcome>> outcomes;
    if (batched) {
      std::vector<BatchStep> steps;
      for (size_t i = 0; i < stepping.size(); ++i) {
        steps.push_back({stepping[i]->session(), requests[i]});
      }
      outcomes = batch->Step(steps);
    } else {
      for (size_t i = 0; i < stepping.size(); ++i) {
        outcomes.push_back(stepping[i]->session()->Step(requests[i]));
      }
    }
    for (size_t i = 0; i < stepping.size(); ++i) {
      if (stepping[i] == probe.get()) continue;
      stepping[i]->Settle(outcomes[i]);
    }
    if (probe != nullptr) {
      const bool server = outcomes.back().ok() && !outcomes.back()->fallback;
      Emit(absl::StrCat(R"({"ev":"probe","t":)", Seconds(probe_created),
                        R"(,"online":)", probe_online ? "true" : "false",
                        R"(,"server":)", server ? "true" : "false", "}"));
      probe->session()->Close().IgnoreError();
    }
    if (!ready) {
      bool all = true;
      for (auto& s : sequences) all = all && s->online();
      if (all) {
        ready = true;
        Emit(absl::StrCat(R"({"ev":"ready","t":)", Seconds(Monotonic()), "}"));
      }
    } else if (!born && !sequences.empty()) {
      bool none = true;
      for (auto& s : sequences) none = none && !s->online();
      if (none) {
        born = true;
        sequences.push_back(std::make_unique<Sequence>("born"));
        create(sequences.back().get());
      }
    }
  }
  const SessionCounters counters = (*client)->counters();
  Emit(absl::StrCat(R"({"ev":"end","t":)", Seconds(Monotonic()), R"(,"recoveries":)",
                    counters.recoveries, R"(,"attempts":)",
                    counters.recovery_attempts, R"(,"steps":)", counters.steps,
                    R"(,"offline_sessions":)", counters.offline_sessions,
                    "}"));
  for (auto& s : sequences) s->session()->Close().IgnoreError();
  return 0;
}

}  // namespace
}  // namespace entrokv

int main(int argc, char** argv) {
  entrokv::Flags flags;
  if (!entrokv::ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: entrokv-fault-driver --target=T [--mode=single|batch]"
                 " [--sessions=N] [--step_every_ms=N] [--probe_every_ms=N]"
                 " [--duration_s=N]\n");
    return 2;
  }
  return entrokv::Run(flags);
}
