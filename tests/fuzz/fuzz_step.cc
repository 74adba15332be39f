// libFuzzer target over what a client's bytes reach in the server: wire parse
// (entrokv.v1 messages) -> proto/convert -> ValidateSessionConfig -> a CPU
// session -> its steps. The input format is in fuzz_input.h.
//
// The target does what server/service.cc and server/session_registry.cc do
// with the same bytes, with the server's limits made small: budget at most
// the per-session live-entry limit (--max_live_entries), the backend's bytes
// capped (--max_bytes), at most kMaxStepsPerMessage steps of the session per
// message (--max_steps_per_session_per_message), steps converted by the
// server's own ToStepInput() (server/step_input.h). A CreateSessionRequest with
// a non-empty session_id gets tight limits (kTight), so that inputs of a few
// KiB reach the ResourceExhausted paths; an empty one the roomy limits.
//
// Every step runs on two sessions of the same config, side by side, each on
// its own backend. The
// target crashes only where a contract is broken:
//  - a valid configuration does not survive ToProto -> FromProto unchanged;
//  - a rejected step changed the session (session.h: "On error the session is
//    unchanged");
//  - an accepted step's result disagrees with the session's own accounting
//    (live count, evicted slots that were not live, a live slot twice, step
//    bookkeeping, bytes held);
//  - the twin sessions answer the same step differently (steps are
//    deterministic);
//  - the backend still counts bytes after the sessions are gone.
// Sanitizers (ASan, UBSan) report the rest.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "entrokv/v1/entrokv.pb.h"
#include "fuzz/fuzz_input.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/convert/config_convert.h"
#include "server/step_input.h"

namespace entrokv::fuzz {
namespace {

struct Limits {
  int64_t max_live_entries;
  int64_t max_bytes;
};
constexpr Limits kRoomy = {4096, int64_t{16} << 20};
constexpr Limits kTight = {16, int64_t{1} << 10};
constexpr int kMaxStepsPerMessage = 16;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "entrokv fuzz: contract broken: %s\n", what);
  std::abort();
}

void Check(bool ok, const char* what) {
  if (!ok) Fail(what);
}

// ENTROKV_FUZZ_VERBOSE=1 (replaying a crasher): say what each input did.
bool Verbose() {
  static const bool verbose = std::getenv("ENTROKV_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

void Note(const char* what, const absl::Status& status) {
  if (Verbose()) {
    std::fprintf(stderr, "  %s: %s\n", what, status.ToString().c_str());
  }
}

bool SameStats(const SessionStats& a, const SessionStats& b) {
  return a.live == b.live && a.peak_live == b.peak_live && a.steps == b.steps &&
         a.last_step == b.last_step && a.appended == b.appended &&
         a.evicted == b.evicted && a.budget == b.budget &&
         a.bytes_held == b.bytes_held && a.placement == b.placement;
}

// ToProto -> FromProto -> ToProto gives the same bytes for a valid config.
void CheckRoundTrip(const SessionConfig& config) {
  v1::SessionConfig first;
  proto::ToProto(config, &first);
  SessionConfig back;
  Check(proto::FromProto(first, &back).ok(),
        "FromProto rejects what ToProto wrote");
  v1::SessionConfig second;
  proto::ToProto(back, &second);
  std::string a, b;
  first.SerializeToString(&a);
  second.SerializeToString(&b);
  Check(a == b, "ToProto -> FromProto changed a valid config");
}

bool SameResult(const StepResult& a, const StepResult& b) {
  return a.evicted == b.evicted && a.live == b.live && a.budget == b.budget &&
         (a.entropy == b.entropy ||
          (std::isnan(a.entropy) && std::isnan(b.entropy))) &&
         a.deferred == b.deferred;
}

// Runs `step` on `session` and on its twin, and checks both.
void RunStep(const v1::SessionStep& step, const Backend& backend,
             SessionState& session, SessionState& twin) {
  const SessionStats before = session.Stats();
  StepInput input;
  if (absl::Status wire = server::ToStepInput(step, &input);
      !wire.ok()) {
    Note("step (server)", wire);
    return;
  }
  const std::vector<uint64_t> live_before = session.LiveSlots();
  StepResult result, twin_result;
  const absl::Status status = session.Step(input, &result);
  const absl::Status twin_status = twin.Step(input, &twin_result);
  const SessionStats after = session.Stats();
  const std::vector<uint64_t> live_after = session.LiveSlots();
  Note("step", status);
  Check(status == twin_status, "twin sessions disagree on a step's status");
  Check(SameStats(after, twin.Stats()), "twin sessions disagree on stats");
  if (!status.ok()) {
    Check(SameStats(before, after), "a rejected step changed the stats");
    Check(live_before == live_after, "a rejected step changed the live slots");
    return;
  }
  Check(SameResult(result, twin_result),
        "twin sessions answered the same step differently");
  Check(after.steps == before.steps + 1, "steps did not advance by one");
  Check(after.last_step == input.step, "last_step is not the step's number");
  Check(result.live == after.live, "result.live != stats.live");
  Check(static_cast<int64_t>(live_after.size()) == after.live,
        "LiveSlots() size != stats.live");
  const int64_t appended = static_cast<int64_t>(input.append.slot_ids.size());
  Check(after.appended == before.appended + appended,
        "appended did not grow by the step's appends");
  Check(after.evicted ==
            before.evicted + static_cast<int64_t>(result.evicted.size()),
        "evicted did not grow by the step's evictions");
  Check(after.live == before.live + appended -
                          static_cast<int64_t>(result.evicted.size()),
        "live != live before + appended - evicted");
  absl::flat_hash_set<uint64_t> held(live_before.begin(), live_before.end());
  held.insert(input.append.slot_ids.begin(), input.append.slot_ids.end());
  absl::flat_hash_set<uint64_t> now;
  for (const uint64_t slot : live_after) {
    Check(now.insert(slot).second, "a slot is live twice");
    Check(held.contains(slot), "a live slot was never appended");
  }
  absl::flat_hash_set<uint64_t> freed;
  for (const uint64_t slot : result.evicted) {
    Check(freed.insert(slot).second, "a slot was evicted twice in one step");
    Check(held.contains(slot), "an evicted slot was not live");
    Check(!now.contains(slot), "an evicted slot is still live");
  }
  Check(after.bytes_held == backend.bytes_held(),
        "the session's bytes_held != its backend's");
}

void Run(const uint8_t* data, size_t size) {
  const std::vector<std::string_view> chunks = SplitChunks(data, size);
  if (chunks.empty()) return;
  v1::CreateSessionRequest create;
  if (!create.ParseFromArray(chunks[0].data(),
                             static_cast<int>(chunks[0].size()))) {
    return;
  }
  SessionConfig config;
  if (absl::Status st = proto::FromProto(create.config(), &config); !st.ok()) {
    Note("FromProto", st);
    return;
  }
  if (absl::Status st = ValidateSessionConfig(config); !st.ok()) {
    Note("ValidateSessionConfig", st);
    return;
  }
  CheckRoundTrip(config);
  const Limits& limits = create.session_id().empty() ? kRoomy : kTight;
  // SessionRegistry::Create(): the per-session limit, then the placement
  // (this target has no GPU).
  if (config.budget > limits.max_live_entries) return;
  if (config.placement == Placement::kGpu &&
      !create.config().placement_fallback()) {
    return;
  }
  config.placement = Placement::kCpu;
  // One backend per twin: each has the whole byte limit.
  BackendOptions backend_options;
  backend_options.max_bytes = limits.max_bytes;
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateBackend(BackendKind::kCpu, backend_options);
  absl::StatusOr<std::unique_ptr<Backend>> twin_backend =
      CreateBackend(BackendKind::kCpu, backend_options);
  Check(backend.ok() && twin_backend.ok(),
        "the CPU backend could not be created");
  SessionLimits session_limits;
  session_limits.max_live_entries = limits.max_live_entries;
  {
    absl::StatusOr<std::unique_ptr<SessionState>> session =
        (*backend)->CreateSession(config, session_limits);
    absl::StatusOr<std::unique_ptr<SessionState>> twin =
        (*twin_backend)->CreateSession(config, session_limits);
    Check(session.ok() == twin.ok(), "twin sessions: one created, one not");
    Note("CreateSession", session.status());
    if (!session.ok()) return;
    v1::DecodeRequest request;
    for (size_t c = 1; c < chunks.size(); ++c) {
      if (!request.ParseFromArray(chunks[c].data(),
                                  static_cast<int>(chunks[c].size()))) {
        continue;
      }
      // The server refuses all of a session's steps in a message past its
      // limit.
      if (request.steps_size() > kMaxStepsPerMessage) continue;
      for (const v1::SessionStep& step : request.steps()) {
        RunStep(step, **backend, **session, **twin);
      }
    }
  }
  Check((*backend)->bytes_held() == 0 && (*twin_backend)->bytes_held() == 0,
        "a backend holds bytes after its session was destroyed");
}

}  // namespace
}  // namespace entrokv::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Parse failures are expected here; protobuf would log each one.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  entrokv::fuzz::Run(data, size);
  return 0;
}
