// entrokv-loadgen: N concurrent synthetic sessions against a running
// entrokv-server, side by side with the Echo baseline of the same bytes.
//
// Each session thread creates a server session, prefills it with --prefill
// entries (in chunks, not measured), then runs --rounds rounds (or, with
// --duration, whole rounds until that time has passed); in each round
// every mode (entrokv Decode steps, then Echo messages of the same sizes) runs
// --steps_per_round steps per session, all sessions in lock step between
// phases, so both modes see the same machine state. Latency is measured from
// a step's send (open loop: from its scheduled time, so queueing counts) to
// its answer.
//
// A server that drains, dies or is not there does not end the run: every
// step that the server did not answer OK is counted by status code (see
// report.h), the report is printed, and the exit code is 0 unless
// --fail_on_error is given. Bad flags exit 2.

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/logging.h"
#include "entrokv/client/client.h"
#include "entrokv/client/raw_transport.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/synthetic.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "report.h"
#include "spdlog/spdlog.h"

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
ABSL_FLAG(int32_t, sessions, 8, "Concurrent sessions (one thread each)");
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
ABSL_FLAG(std::string, sketch, "exact",
          "exact or project:R (client library only: it projects)");
ABSL_FLAG(std::string, query_form, "per_head",
          "per_head or group_sum (client library only)");
ABSL_FLAG(int32_t, decide_every, 1, "Decision cadence K");
ABSL_FLAG(bool, block_summary, false,
          "One state per block (needs --block_size >= 2)");
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

constexpr uint64_t kSlotBase = 1'000'000;

struct PoolStep {
  std::string key;  // One entry, in the wire element type.
  std::string query;
  double entropy;
};

// What one session sends: prefill chunks and a pool of decode steps.
struct SessionData {
  std::vector<std::string> prefill_keys;  // Per chunk.
  std::vector<int> prefill_counts;
  std::string prefill_query;
  double prefill_entropy = 1.0;
  std::vector<PoolStep> pool;
};

std::string EncodeBytes(ElementType type, const std::vector<float>& values) {
  std::string out(values.size() * ElementSize(type), '\0');
  EncodeElements(type, values.data(), values.size(),
                 reinterpret_cast<std::byte*>(out.data()));
  return out;
}

SessionData MakeData(const SessionConfig& config, int prefill, int chunk,
                     int pool, uint64_t seed) {
  SyntheticParams params;
  params.shape = config.shape;
  params.seed = seed;
  SyntheticStream stream(params);
  SyntheticStep step;
  SessionData data;
  const ElementType type = config.shape.element_type;
  for (int i = 0; i < prefill; ++i) {
    if (i % chunk == 0) {
      data.prefill_keys.emplace_back();
      data.prefill_counts.push_back(0);
    }
    stream.Next(&step);
    data.prefill_keys.back() += EncodeBytes(type, step.key);
    ++data.prefill_counts.back();
    data.prefill_query = EncodeBytes(type, step.query);
    data.prefill_entropy = step.entropy;
  }
  for (int i = 0; i < pool; ++i) {
    stream.Next(&step);
    data.pool.push_back(PoolStep{EncodeBytes(type, step.key),
                                 EncodeBytes(type, step.query), step.entropy});
  }
  return data;
}

void FillStep(const std::string& id, uint64_t step, uint64_t first_slot,
              int count, const std::string& keys, const std::string& query,
              double entropy, v1::SessionStep* out) {
  out->set_session_id(id);
  out->set_step(step);
  for (int i = 0; i < count; ++i) {
    out->mutable_append()->add_slot_ids(first_slot + i);
  }
  out->mutable_append()->set_keys(keys);
  out->set_queries(query);
  out->set_entropy(entropy);
}

// Deadline of the unary calls (CreateSession, CloseSession) of
// --client=sync.
constexpr auto kUnaryDeadline = std::chrono::seconds(10);

std::string CodeName(absl::StatusCode code) {
  return absl::StatusCodeToString(code);
}

// The code a fallback step is counted under: that of the session's degraded
// reason (never "OK", which would read as a server answer).
std::string FallbackCause(const Session& session) {
  const absl::StatusCode code = session.degraded_reason().code();
  return code == absl::StatusCode::kOk ? "UNKNOWN" : CodeName(code);
}

// A session whose prefill was decided locally is degraded for good (every
// step of it would be a fallback): its start counts as failed.
absl::Status PrefillFellBack(const Session& session) {
  const absl::Status reason = session.degraded_reason();
  return absl::Status(
      reason.ok() ? absl::StatusCode::kUnavailable : reason.code(),
      absl::StrCat("prefill decided locally: ", reason.message()));
}

absl::Status ToAbsl(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

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

// A blocking bidi stream that is finished exactly once. gRPC aborts the
// process (GRPC_CALL_ERROR_TOO_MANY_OPERATIONS) when Finish() is called twice
// on one call: a stream that broke mid-run (a drain, a dead server) was
// finished when it broke and must not be finished again when it is closed.
template <typename W, typename R>
class SyncStream {
 public:
  // `open` starts the call on the context it is given, e.g.
  // [&](grpc::ClientContext* c) { return stub->Decode(c); }.
  template <typename Open>
  explicit SyncStream(Open open)
      : stream_(open(&context_)) {}
  ~SyncStream() {
    if (!ended_) {
      context_.TryCancel();
      (void)stream_->Finish();
    }
  }
  SyncStream(const SyncStream&) = delete;
  SyncStream& operator=(const SyncStream&) = delete;

  // Writes `request` and reads one reply. False when the stream has ended
  // (now or before): status() then says why.
  bool RoundTrip(const W& request, R* reply) {
    if (ended_) return false;
    const uint64_t ticket = Arm();
    const bool answered = stream_->Write(request) && stream_->Read(reply);
    Disarm(ticket);
    if (answered) return true;
    End();
    return false;
  }

  // Half-closes the stream if it is still open and returns its final status.
  absl::Status Close() {
    if (!ended_) {
      const uint64_t ticket = Arm();
      stream_->WritesDone();
      ended_ = true;
      status_ = ToAbsl(stream_->Finish());
      Disarm(ticket);
      if (fired_) status_ = TimedOut();
    }
    return status_;
  }

  bool ended() const { return ended_; }
  // Why the stream ended; UNAVAILABLE when the server ended it with OK while
  // a request was unanswered.
  const absl::Status& status() const { return status_; }

 private:
  // After a failed Write or Read: the server ended the call or it broke.
  void End() {
    ended_ = true;
    status_ = ToAbsl(stream_->Finish());
    if (fired_) {
      status_ = TimedOut();
    } else if (status_.ok()) {
      status_ = absl::UnavailableError("stream ended without an answer");
    }
  }
  // The library's watchdog cancels the call after --sync_timeout: gRPC's
  // blocking streams have no per-message deadline.
  uint64_t Arm() {
    return ArmCallDeadline(&context_,
                           absl::Now() + absl::GetFlag(FLAGS_sync_timeout));
  }
  void Disarm(uint64_t ticket) {
    if (DisarmCallDeadline(ticket)) fired_ = true;
  }
  static absl::Status TimedOut() {
    return absl::DeadlineExceededError(
        absl::StrCat("no answer within --sync_timeout=",
                     absl::FormatDuration(absl::GetFlag(FLAGS_sync_timeout)),
                     "; the stream was cancelled"));
  }

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<W, R>> stream_;
  bool fired_ = false;  // Cancelled for taking longer than --sync_timeout.
  bool ended_ = false;
  absl::Status status_;
};

using DecodeStream = SyncStream<v1::DecodeRequest, v1::DecodeResponse>;
using EchoStream = SyncStream<v1::EchoMessage, v1::EchoMessage>;

// `bytes` (elements of `type`, as MakeData encodes them) as a VectorView.
VectorView ViewOf(ElementType type, const std::string& bytes) {
  if (type == ElementType::kF32) {
    return VectorView::F32(
        {reinterpret_cast<const float*>(bytes.data()), bytes.size() / 4});
  }
  const auto* bits = reinterpret_cast<const uint16_t*>(bytes.data());
  return type == ElementType::kF16 ? VectorView::F16({bits, bytes.size() / 2})
                                   : VectorView::Bf16({bits, bytes.size() / 2});
}

// Open loop: waits for step k's scheduled time and returns it; closed loop:
// now.
absl::Time PaceStep(double rate, absl::Time phase_start, int k) {
  absl::Time start = absl::Now();
  if (rate > 0) {
    const absl::Time scheduled = phase_start + absl::Seconds(k / rate);
    if (scheduled > start) absl::SleepFor(scheduled - start);
    start = scheduled;
  }
  return start;
}

struct Shared {
  std::shared_ptr<v1::EntroKv::Stub> stub;
  std::unique_ptr<Client> client;  // --client=library
  SessionConfig config;
  std::vector<std::string> modes;
  int rounds = 0;
  int steps_per_round = 0;
  double per_session_rate = 0.0;
  int prefill_chunk = 0;
  int64_t echo_reply_bytes = 0;
  std::atomic<int64_t> done{0};
  absl::Mutex mu;
  std::map<std::string, ModeStats> stats ABSL_GUARDED_BY(mu);
  RunFailures failures ABSL_GUARDED_BY(mu);

  void CloseFailed(const absl::Status& status) {
    absl::MutexLock lock(&mu);
    ++failures.closes_failed[CodeName(status.code())];
  }
};

// One thread's work: set up, then each phase between barrier waits.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual absl::Status SetUp() = 0;
  virtual void RunPhase(const std::string& mode, absl::Time phase_start) = 0;
  virtual void TearDown() = 0;
};

// One session's thread.
class SessionRunner final : public Runner {
 public:
  SessionRunner(Shared* shared, SessionData data, int index)
      : shared_(shared), data_(std::move(data)), index_(index) {}

  absl::Status SetUp() override {
    v1::CreateSessionRequest request;
    v1::SessionConfig* config = request.mutable_config();
    const SessionConfig& c = shared_->config;
    config->mutable_shape()->set_layers(c.shape.layers);
    config->mutable_shape()->set_kv_heads(c.shape.kv_heads);
    config->mutable_shape()->set_q_heads(c.shape.q_heads);
    config->mutable_shape()->set_head_dim(c.shape.head_dim);
    config->mutable_shape()->set_element_type(
        c.shape.element_type == ElementType::kF32   ? v1::ELEMENT_TYPE_F32
        : c.shape.element_type == ElementType::kF16 ? v1::ELEMENT_TYPE_F16
                                                    : v1::ELEMENT_TYPE_BF16);
    config->set_budget(c.budget);
    config->set_policy(PolicyName(c));
    config->set_block_size(c.block_size);
    config->set_placement(c.placement == Placement::kCpu ? v1::PLACEMENT_CPU
                          : c.placement == Placement::kGpu
                              ? v1::PLACEMENT_GPU
                              : v1::PLACEMENT_AUTO);
    config->set_placement_fallback(true);
    config->set_decide_every(c.decide_every);
    config->set_block_summary(c.block_summary);
    if (UsesLibrary()) {
      SessionOptions options;
      options.step_deadline = absl::GetFlag(FLAGS_step_deadline);
      options.create_deadline = absl::GetFlag(FLAGS_create_deadline);
      options.offline_when_unavailable = false;
      options.stream_api = absl::GetFlag(FLAGS_client) == "library-callback"
                               ? StreamApi::kCallback
                               : StreamApi::kSync;
      absl::StatusOr<std::unique_ptr<Session>> session =
          shared_->client->CreateSession(c, options);
      if (!session.ok()) return session.status();
      session_ = *std::move(session);
      id_ = session_->id();
    } else {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + kUnaryDeadline);
      v1::CreateSessionResponse response;
      grpc::Status status =
          shared_->stub->CreateSession(&context, request, &response);
      if (!status.ok()) return ToAbsl(status);
      id_ = response.session_id();
      decode_ = std::make_unique<DecodeStream>(
          [&](grpc::ClientContext* c) { return shared_->stub->Decode(c); });
      v1::DecodeRequest attach;
      attach.add_attach(id_);
      v1::DecodeResponse reply;
      if (!decode_->RoundTrip(attach, &reply)) {
        const absl::Status& ended = decode_->status();
        return absl::Status(ended.code(),
                            absl::StrCat("Decode attach: ", ended.message()));
      }
      if (reply.attach_results_size() != 1) {
        return absl::InternalError("Decode attach: no attach result");
      }
      if (reply.attach_results(0).status().code() != 0) {
        return absl::FailedPreconditionError(
            reply.attach_results(0).status().message());
      }
    }
    // Prefill, in chunks.
    for (size_t c = 0; c < data_.prefill_keys.size(); ++c) {
      const int count = data_.prefill_counts[c];
      bool fallback = false;
      absl::Status status =
          SendDecode(data_.prefill_keys[c], count, data_.prefill_query,
                     data_.prefill_entropy, nullptr, &fallback);
      if (!status.ok()) return status;
      if (fallback) return PrefillFellBack(*session_);
    }
    if (std::find(shared_->modes.begin(), shared_->modes.end(), "echo") !=
        shared_->modes.end()) {
      echo_ = std::make_unique<EchoStream>(
          [&](grpc::ClientContext* c) { return shared_->stub->Echo(c); });
    }
    return absl::OkStatus();
  }

  void RunPhase(const std::string& mode, absl::Time phase_start) override {
    ModeStats stats;
    const bool echo = mode == "echo";
    for (int k = 0; k < shared_->steps_per_round; ++k) {
      const absl::Time start =
          PaceStep(shared_->per_session_rate, phase_start, k);
      shared_->done.fetch_add(1, std::memory_order_relaxed);
      // A stream that ended stays ended: its steps are not sent, and are
      // counted under the status that ended it.
      const DecodeStream* ended_decode =
          decode_ != nullptr && decode_->ended() ? decode_.get() : nullptr;
      if (echo ? echo_->ended() : ended_decode != nullptr) {
        ++stats.not_sent[CodeName(echo ? echo_->status().code()
                                       : ended_decode->status().code())];
        continue;
      }
      const PoolStep& p = data_.pool[pool_index_++ % data_.pool.size()];
      bool fallback = false;
      absl::Status status =
          echo ? SendEcho(&stats)
               : SendDecode(p.key, 1, p.query, p.entropy, &stats, &fallback);
      if (fallback) {
        // Not a server answer: kept out of the count, the status histogram,
        // the evictions per step and the latency figures.
        ++stats.fallbacks;
        ++stats.fallback_causes[FallbackCause(*session_)];
      } else if (!status.ok()) {
        ++stats.codes[CodeName(status.code())];
      } else {
        ++stats.codes["OK"];
        stats.latency_ns.push_back(
            absl::ToInt64Nanoseconds(absl::Now() - start));
      }
    }
    absl::MutexLock lock(&shared_->mu);
    shared_->stats[mode].Merge(stats);
  }

  // Safe after a failed SetUp() and after any failure of the server.
  void TearDown() override {
    if (UsesLibrary()) {
      if (session_ != nullptr) {
        if (absl::Status closed = session_->Close(); !closed.ok()) {
          shared_->CloseFailed(closed);
        }
      }
      return;
    }
    // A stream that broke was counted when it broke: only its close
    // matters here.
    if (echo_ != nullptr) (void)echo_->Close();
    if (decode_ != nullptr) (void)decode_->Close();
    if (!id_.empty()) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + kUnaryDeadline);
      v1::CloseSessionRequest request;
      request.set_session_id(id_);
      v1::CloseSessionResponse response;
      const grpc::Status status =
          shared_->stub->CloseSession(&context, request, &response);
      if (!status.ok()) shared_->CloseFailed(ToAbsl(status));
    }
  }

 private:
  bool UsesLibrary() const { return shared_->client != nullptr; }

  // Sends one step of `count` new entries; `stats` null: not measured.
  // Returns the step's status: OK, the server's rejection, or the status of
  // the stream that ended (--client=sync). `*fallback` is set when the
  // client library decided the step locally instead of the server
  // (--client=library*); the status is then OK.
  absl::Status SendDecode(const std::string& keys, int count,
                          const std::string& query, double entropy,
                          ModeStats* stats, bool* fallback) {
    const uint64_t first_slot = kSlotBase + next_slot_;
    next_slot_ += count;
    if (UsesLibrary()) {
      std::vector<uint64_t> slots(count);
      for (int i = 0; i < count; ++i) slots[i] = first_slot + i;
      const ElementType type = shared_->config.shape.element_type;
      StepRequest request;
      request.slot_ids = slots;
      request.keys = ViewOf(type, keys);
      request.queries = ViewOf(type, query);
      request.entropy = entropy;
      const SessionCounters before = session_->counters();
      absl::StatusOr<StepOutcome> outcome = session_->Step(request);
      if (!outcome.ok()) return outcome.status();
      *fallback = outcome->fallback;
      if (stats != nullptr) {
        const SessionCounters after = session_->counters();
        stats->bytes_sent += after.bytes_sent - before.bytes_sent;
        stats->bytes_received += after.bytes_received - before.bytes_received;
        if (!outcome->fallback) {
          stats->evicted += static_cast<int64_t>(outcome->evicted.size());
          stats->server_ns.push_back(
              absl::ToInt64Nanoseconds(outcome->server_compute));
        }
      }
      return absl::OkStatus();
    }
    request_.Clear();
    FillStep(id_, step_++, first_slot, count, keys, query, entropy,
             request_.add_steps());
    if (!decode_->RoundTrip(request_, &response_)) {
      const absl::Status& ended = decode_->status();
      return absl::Status(ended.code(),
                          absl::StrCat("Decode: ", ended.message()));
    }
    if (stats != nullptr) {
      stats->bytes_sent += static_cast<int64_t>(request_.ByteSizeLong());
      stats->bytes_received += static_cast<int64_t>(response_.ByteSizeLong());
    }
    if (response_.results_size() != 1) {
      --step_;
      return absl::InternalError(absl::StrCat(
          "Decode: expected one step result, got ", response_.results_size()));
    }
    const v1::SessionStepResult& result = response_.results(0);
    if (result.status().code() != 0) {
      --step_;  // The session is unchanged; the number is free again.
      return absl::Status(static_cast<absl::StatusCode>(result.status().code()),
                          result.status().message());
    }
    if (stats != nullptr) {
      stats->evicted += result.evicted_size();
      stats->server_ns.push_back(result.compute_ns());
    }
    return absl::OkStatus();
  }

  absl::Status SendEcho(ModeStats* stats) {
    // The same bytes as a decode step: the request's serialized size, and a
    // reply as large as a typical step result.
    echo_request_.mutable_payload()->assign(
        static_cast<size_t>(request_size_hint()), 'x');
    echo_request_.set_reply_bytes(
        static_cast<uint32_t>(shared_->echo_reply_bytes));
    if (!echo_->RoundTrip(echo_request_, &echo_response_)) {
      const absl::Status& ended = echo_->status();
      return absl::Status(ended.code(),
                          absl::StrCat("Echo: ", ended.message()));
    }
    stats->bytes_sent += static_cast<int64_t>(echo_request_.ByteSizeLong());
    stats->bytes_received +=
        static_cast<int64_t>(echo_response_.ByteSizeLong());
    return absl::OkStatus();
  }

  int64_t request_size_hint() {
    if (request_size_ == 0) {
      v1::DecodeRequest r;
      const PoolStep& p = data_.pool[0];
      FillStep(id_, step_ + 1000, kSlotBase + next_slot_, 1, p.key, p.query,
               p.entropy, r.add_steps());
      request_size_ = static_cast<int64_t>(r.ByteSizeLong());
    }
    return request_size_;
  }

  Shared* shared_;
  SessionData data_;
  int index_;
  std::string id_;
  uint64_t step_ = 0;
  uint64_t next_slot_ = 0;
  size_t pool_index_ = 0;
  int64_t request_size_ = 0;
  std::unique_ptr<Session> session_;
  std::unique_ptr<DecodeStream> decode_;  // --client=sync
  std::unique_ptr<EchoStream> echo_;
  v1::DecodeRequest request_;
  v1::DecodeResponse response_;
  v1::EchoMessage echo_request_;
  v1::EchoMessage echo_response_;
};

// One thread stepping `data.size()` sessions through one DecodeBatch: one
// message per decode step for all of them. Echo sends one message of the
// same bytes each way.
class BatchRunner final : public Runner {
 public:
  BatchRunner(Shared* shared, std::vector<SessionData> data)
      : shared_(shared), data_(std::move(data)) {}

  absl::Status SetUp() override {
    batch_ = shared_->client->CreateBatch(
        absl::GetFlag(FLAGS_client) == "library-callback" ? StreamApi::kCallback
                                                          : StreamApi::kSync);
    SessionOptions options;
    options.step_deadline = absl::GetFlag(FLAGS_step_deadline);
    options.create_deadline = absl::GetFlag(FLAGS_create_deadline);
    options.offline_when_unavailable = false;
    for (size_t i = 0; i < data_.size(); ++i) {
      absl::StatusOr<std::unique_ptr<Session>> session =
          batch_->CreateSession(shared_->config, options);
      if (!session.ok()) return session.status();
      sessions_.push_back(*std::move(session));
    }
    next_slot_.assign(data_.size(), 0);
    // Prefill one session per message: a whole batch's prefill chunk could
    // pass the server's message size limit.
    for (size_t i = 0; i < data_.size(); ++i) {
      for (size_t c = 0; c < data_[i].prefill_keys.size(); ++c) {
        const std::vector<uint64_t> slots =
            Slots(i, data_[i].prefill_counts[c]);
        const BatchStep step{
            sessions_[i].get(),
            Request(slots, data_[i].prefill_keys[c], data_[i].prefill_query,
                    data_[i].prefill_entropy)};
        absl::StatusOr<StepOutcome> o = std::move(batch_->Step({&step, 1})[0]);
        if (!o.ok()) return o.status();
        if (o->fallback) return PrefillFellBack(*sessions_[i]);
      }
    }
    if (std::find(shared_->modes.begin(), shared_->modes.end(), "echo") !=
        shared_->modes.end()) {
      echo_ = std::make_unique<EchoStream>(
          [&](grpc::ClientContext* c) { return shared_->stub->Echo(c); });
    }
    return absl::OkStatus();
  }

  void RunPhase(const std::string& mode, absl::Time phase_start) override {
    ModeStats stats;
    const int64_t n = static_cast<int64_t>(data_.size());
    for (int k = 0; k < shared_->steps_per_round; ++k) {
      PaceStep(shared_->per_session_rate, phase_start, k);
      if (mode != "echo") {
        Decode(&stats);
      } else if (echo_->ended()) {
        // Not sent: counted under the status that ended the stream.
        stats.not_sent[CodeName(echo_->status().code())] += n;
      } else {
        Echo(&stats);
      }
      shared_->done.fetch_add(n, std::memory_order_relaxed);
    }
    absl::MutexLock lock(&shared_->mu);
    shared_->stats[mode].Merge(stats);
  }

  // Safe after a failed SetUp() and after any failure of the server.
  void TearDown() override {
    for (auto& session : sessions_) {
      if (absl::Status closed = session->Close(); !closed.ok()) {
        shared_->CloseFailed(closed);
      }
    }
    // A broken echo stream was counted when it broke.
    if (echo_ != nullptr) (void)echo_->Close();
  }

 private:
  std::vector<uint64_t> Slots(size_t i, int count) {
    std::vector<uint64_t> slots(count);
    for (int e = 0; e < count; ++e) slots[e] = kSlotBase + next_slot_[i]++;
    return slots;
  }

  StepRequest Request(const std::vector<uint64_t>& slots,
                      const std::string& keys, const std::string& query,
                      double entropy) const {
    const ElementType type = shared_->config.shape.element_type;
    StepRequest request;
    request.slot_ids = slots;
    request.keys = ViewOf(type, keys);
    request.queries = ViewOf(type, query);
    request.entropy = entropy;
    return request;
  }

  void Decode(ModeStats* stats) {
    std::vector<std::vector<uint64_t>> slots;
    std::vector<const PoolStep*> picks;
    for (size_t i = 0; i < data_.size(); ++i) {
      picks.push_back(&data_[i].pool[pool_index_ % data_[i].pool.size()]);
      slots.push_back(Slots(i, 1));
    }
    ++pool_index_;
    std::vector<BatchStep> steps;
    std::vector<SessionCounters> before;
    for (size_t i = 0; i < data_.size(); ++i) {
      steps.push_back(
          {sessions_[i].get(), Request(slots[i], picks[i]->key, picks[i]->query,
                                       picks[i]->entropy)});
      before.push_back(sessions_[i]->counters());
    }
    const absl::Time start = absl::Now();
    std::vector<absl::StatusOr<StepOutcome>> outcomes = batch_->Step(steps);
    const absl::Duration latency = absl::Now() - start;
    bool all_server = true;
    int64_t sent = 0, received = 0;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const SessionCounters after = sessions_[i]->counters();
      sent += after.bytes_sent - before[i].bytes_sent;
      received += after.bytes_received - before[i].bytes_received;
      if (!outcomes[i].ok()) {
        ++stats->codes[CodeName(outcomes[i].status().code())];
        all_server = false;
      } else if (outcomes[i]->fallback) {
        ++stats->fallbacks;
        ++stats->fallback_causes[FallbackCause(*sessions_[i])];
        all_server = false;
      } else {
        ++stats->codes["OK"];
        stats->evicted += static_cast<int64_t>(outcomes[i]->evicted.size());
        stats->server_ns.push_back(
            absl::ToInt64Nanoseconds(outcomes[i]->server_compute));
      }
    }
    stats->bytes_sent += sent;
    stats->bytes_received += received;
    last_sent_ = sent;
    last_received_ = received;
    // A message's latency counts only when the server answered all of it.
    if (all_server) {
      stats->latency_ns.push_back(absl::ToInt64Nanoseconds(latency));
    }
  }

  void Echo(ModeStats* stats) {
    if (last_sent_ == 0) {
      // No decode message yet this run: size one like it.
      last_sent_ = static_cast<int64_t>(data_.size()) * 64;
      last_received_ = static_cast<int64_t>(data_.size()) * 48;
    }
    echo_request_.mutable_payload()->assign(static_cast<size_t>(last_sent_),
                                            'x');
    echo_request_.set_reply_bytes(static_cast<uint32_t>(last_received_));
    const absl::Time start = absl::Now();
    if (!echo_->RoundTrip(echo_request_, &echo_response_)) {
      // The message carried one step of each session.
      stats->codes[CodeName(echo_->status().code())] +=
          static_cast<int64_t>(data_.size());
      return;
    }
    stats->latency_ns.push_back(absl::ToInt64Nanoseconds(absl::Now() - start));
    stats->bytes_sent += static_cast<int64_t>(echo_request_.ByteSizeLong());
    stats->bytes_received +=
        static_cast<int64_t>(echo_response_.ByteSizeLong());
    stats->codes["OK"] += static_cast<int64_t>(data_.size());
  }

  Shared* shared_;
  std::vector<SessionData> data_;
  std::unique_ptr<DecodeBatch> batch_;
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<uint64_t> next_slot_;
  size_t pool_index_ = 0;
  int64_t last_sent_ = 0;
  int64_t last_received_ = 0;
  std::unique_ptr<EchoStream> echo_;
  v1::EchoMessage echo_request_;
  v1::EchoMessage echo_response_;
};

// One Echo round trip: OK when the server serves Echo, else the stream's
// status (UNIMPLEMENTED when the server runs without --enable_echo).
absl::Status ProbeEcho(v1::EntroKv::Stub* stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  auto stream = stub->Echo(&context);
  v1::EchoMessage request;
  request.set_reply_bytes(1);
  v1::EchoMessage reply;
  const bool answered = stream->Write(request) && stream->Read(&reply);
  if (answered) stream->WritesDone();
  const grpc::Status status = stream->Finish();
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  if (!answered) return absl::UnknownError("Echo ended without a reply");
  return absl::OkStatus();
}

// The progress bar: the share of the planned steps done, or with a
// --duration, of the time passed; and the phase now running.
struct ProgressPlan {
  int64_t total_steps = 0;     // Without a duration.
  absl::Duration duration;     // Zero: none.
  std::vector<std::string> modes;
  int rounds = 0;              // Without a duration.
};

void ProgressLoop(Shared* shared, const ProgressPlan* plan,
                  std::atomic<bool>* stop, std::atomic<int>* phase) {
  const absl::Time start = absl::Now();
  const size_t modes = plan->modes.size();
  while (!stop->load()) {
    const int64_t done = shared->done.load();
    const absl::Duration elapsed = absl::Now() - start;
    double fraction =
        plan->duration > absl::ZeroDuration()
            ? absl::FDivDuration(elapsed, plan->duration)
            : (plan->total_steps > 0 ? double(done) / plan->total_steps : 1.0);
    fraction = std::min(fraction, 1.0);
    const int width = 40;
    const int filled = static_cast<int>(fraction * width);
    const int p = phase->load();
    const std::string of_rounds =
        plan->rounds > 0 ? absl::StrCat("/", plan->rounds) : "";
    const std::string label =
        plan->rounds > 0 && p >= plan->rounds * static_cast<int>(modes)
            ? "done"
            : absl::StrFormat("round %d%s %s", p / modes + 1, of_rounds,
                              plan->modes[p % modes]);
    std::fprintf(stderr, "\r[%s%s] %5.1f%%  %lld%s steps  %.1fs  %s   ",
                 std::string(filled, '=').c_str(),
                 std::string(width - filled, ' ').c_str(), 100 * fraction,
                 static_cast<long long>(done),
                 plan->total_steps > 0
                     ? absl::StrCat("/", plan->total_steps).c_str()
                     : "",
                 absl::ToDoubleSeconds(elapsed), label.c_str());
    std::fflush(stderr);
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::fprintf(stderr, "\n");
}

int Run() {
  SessionConfig config;
  config.shape.layers = absl::GetFlag(FLAGS_layers);
  config.shape.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  config.shape.q_heads = absl::GetFlag(FLAGS_q_heads);
  config.shape.head_dim = absl::GetFlag(FLAGS_head_dim);
  if (!ParseElementType(absl::GetFlag(FLAGS_dtype),
                        &config.shape.element_type)) {
    std::fprintf(stderr, "--dtype: unknown element type\n");
    return 2;
  }
  config.budget = absl::GetFlag(FLAGS_budget);
  config.block_size = absl::GetFlag(FLAGS_block_size);
  config.block_summary = absl::GetFlag(FLAGS_block_summary);
  config.decide_every = absl::GetFlag(FLAGS_decide_every);
  if (absl::Status sketch =
          ApplySketchName(absl::GetFlag(FLAGS_sketch), &config.shape);
      !sketch.ok()) {
    std::fprintf(stderr, "--%s\n", sketch.ToString().c_str());
    return 2;
  }
  if (!ParseQueryForm(absl::GetFlag(FLAGS_query_form),
                      &config.shape.query_form)) {
    std::fprintf(stderr, "--query_form: per_head or group_sum\n");
    return 2;
  }
  if (!ParsePlacement(absl::GetFlag(FLAGS_placement), &config.placement)) {
    std::fprintf(stderr, "--placement: unknown placement\n");
    return 2;
  }
  absl::Status status = ApplyPolicyName(absl::GetFlag(FLAGS_policy), &config);
  if (status.ok()) status = ValidateSessionConfig(config);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 2;
  }

  Shared shared;
  shared.config = config;
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "both") {
    shared.modes = {"entrokv", "echo"};
  } else if (mode == "entrokv" || mode == "echo") {
    shared.modes = {mode};
  } else {
    std::fprintf(stderr, "--mode: entrokv, echo or both\n");
    return 2;
  }
  const std::string client_kind = absl::GetFlag(FLAGS_client);
  if (client_kind != "sync" && client_kind != "library" &&
      client_kind != "library-callback") {
    std::fprintf(stderr, "--client: sync, library or library-callback\n");
    return 2;
  }
  const int sessions = std::max(1, absl::GetFlag(FLAGS_sessions));
  const int batch = std::max(1, absl::GetFlag(FLAGS_batch));
  if (client_kind == "sync" &&
      (batch > 1 || config.shape.sketch_dim > 0 ||
       config.shape.query_form != QueryForm::kPerHead)) {
    std::fprintf(stderr,
                 "--batch, --sketch and --query_form=group_sum need the client "
                 "library: add --client=library\n");
    return 2;
  }
  if (sessions % batch != 0) {
    std::fprintf(stderr, "--sessions %d is not a multiple of --batch %d\n",
                 sessions, batch);
    return 2;
  }
  const int threads_count = sessions / batch;
  shared.rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  if (absl::GetFlag(FLAGS_duration) < absl::ZeroDuration()) {
    std::fprintf(stderr, "--duration %s: must not be negative\n",
                 absl::FormatDuration(absl::GetFlag(FLAGS_duration)).c_str());
    return 2;
  }
  shared.steps_per_round = std::max(1, absl::GetFlag(FLAGS_steps_per_round));
  // Per thread: a thread steps a session, or a batch of them at once.
  shared.per_session_rate = absl::GetFlag(FLAGS_rate) / threads_count;
  shared.prefill_chunk = std::max(1, absl::GetFlag(FLAGS_prefill_chunk));

  const std::string target = absl::GetFlag(FLAGS_target);
  ClientOptions options;
  options.target = target;
  options.max_message_bytes = 256 << 20;
  options.tls_root_certs_file = absl::GetFlag(FLAGS_tls_root_certs);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  if (const std::string file = absl::GetFlag(FLAGS_auth_token_file);
      !file.empty()) {
    absl::StatusOr<std::string> token = ReadFlagFile("auth_token_file", file);
    if (!token.ok()) {
      std::fprintf(stderr, "%s\n", token.status().ToString().c_str());
      return 2;
    }
    options.bearer_token = std::string(absl::StripAsciiWhitespace(*token));
  }
  // Echo, and Decode with --client=sync, go over the library's channel
  // (credentials, bearer token) without the library. Neither it nor
  // Connect() waits for the server: they fail only on options, i.e. on
  // flags.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateChannel(options);
  if (!channel.ok()) {
    std::fprintf(stderr, "%s\n", channel.status().ToString().c_str());
    return 2;
  }
  shared.stub =
      std::shared_ptr<v1::EntroKv::Stub>(v1::EntroKv::NewStub(*channel));
  if (client_kind != "sync") {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    if (!client.ok()) {
      std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
      return 2;
    }
    shared.client = *std::move(client);
  }
  if (std::find(shared.modes.begin(), shared.modes.end(), "echo") !=
      shared.modes.end()) {
    const absl::Status echo = ProbeEcho(shared.stub.get());
    if (absl::IsUnimplemented(echo) || absl::IsFailedPrecondition(echo)) {
      spdlog::warn(
          "the server does not serve Echo: {}{}", echo.ToString(),
          absl::StrContains(echo.message(), "--enable_echo")
              ? ""
              : " (entrokv-server serves Echo only with --enable_echo)");
      shared.modes.erase(
          std::find(shared.modes.begin(), shared.modes.end(), "echo"));
      if (shared.modes.empty()) return 1;
      spdlog::warn("running without the echo baseline");
    }
  }
  {
    // A typical step result: one evicted slot.
    v1::DecodeResponse typical;
    v1::SessionStepResult* r = typical.add_results();
    r->set_session_id("s-0000000000000000");
    r->set_step(1000);
    r->add_evicted(kSlotBase + 1000);
    r->set_live(config.budget);
    r->set_budget(config.budget);
    r->set_entropy(1.2345);
    r->set_compute_ns(12345);
    shared.echo_reply_bytes = static_cast<int64_t>(typical.ByteSizeLong());
  }

  const int prefill = std::max(0, absl::GetFlag(FLAGS_prefill));
  std::vector<std::unique_ptr<Runner>> runners;
  for (int t = 0; t < threads_count; ++t) {
    std::vector<SessionData> data;
    for (int j = 0; j < batch; ++j) {
      const int i = t * batch + j;
      data.push_back(MakeData(config, prefill, shared.prefill_chunk,
                              std::max(1, absl::GetFlag(FLAGS_pool)),
                              absl::GetFlag(FLAGS_seed) + i));
    }
    if (batch == 1) {
      runners.push_back(
          std::make_unique<SessionRunner>(&shared, std::move(data[0]), t));
    } else {
      runners.push_back(
          std::make_unique<BatchRunner>(&shared, std::move(data)));
    }
  }

  // Phases: [setup] then rounds x modes; each ends at a barrier. Phase p
  // runs mode p % modes. With --duration the rounds go on until it has
  // passed, checked when a round ends (the round in progress finishes).
  // The barrier's completion step decides, before any thread goes on, so
  // that every thread sees the same answer.
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const size_t modes_per_round = shared.modes.size();
  const size_t planned_phases =
      duration > absl::ZeroDuration()
          ? std::numeric_limits<size_t>::max()
          : static_cast<size_t>(shared.rounds) * modes_per_round;
  std::vector<std::string> phase_modes;  // Of the phases completed.
  std::atomic<bool> last_phase_done{planned_phases == 0};
  std::atomic<int> phase{0};
  std::vector<absl::Time> phase_ends;
  absl::Time phase_start = absl::Now();
  absl::Time setup_end;
  bool setup_done = false;
  auto on_phase_end = [&]() noexcept {
    const absl::Time now = absl::Now();
    if (!setup_done) {
      setup_done = true;
      setup_end = now;
    } else {
      phase_ends.push_back(now);
      phase_modes.push_back(shared.modes[phase_modes.size() % modes_per_round]);
      phase.fetch_add(1);
    }
    const size_t done = phase_modes.size();
    if (done >= planned_phases ||
        (duration > absl::ZeroDuration() && done % modes_per_round == 0 &&
         done > 0 && now - setup_end >= duration)) {
      last_phase_done.store(true);
    }
    phase_start = now;
  };
  std::barrier barrier(threads_count, on_phase_end);
  std::atomic<bool> stop_progress{false};
  std::thread progress;
  std::vector<absl::Status> setup_status(threads_count);
  std::vector<std::thread> threads;
  for (int i = 0; i < threads_count; ++i) {
    threads.emplace_back([&, i]() {
      setup_status[i] = runners[i]->SetUp();
      barrier.arrive_and_wait();
      for (size_t p = 0; !last_phase_done.load(); ++p) {
        const std::string& mode = shared.modes[p % modes_per_round];
        if (!setup_status[i].ok()) {
          // Keep the lock step; the steps of sessions that never started
          // are not sent, counted under the status their start failed with.
          const std::string code = CodeName(setup_status[i].code());
          ModeStats stats;
          stats.not_sent[code] = int64_t{batch} * shared.steps_per_round;
          shared.done.fetch_add(stats.not_sent[code]);
          absl::MutexLock lock(&shared.mu);
          shared.stats[mode].Merge(stats);
        } else {
          runners[i]->RunPhase(mode, phase_start);
        }
        barrier.arrive_and_wait();
      }
      // Closes whatever was opened, a failed start included.
      runners[i]->TearDown();
    });
  }
  ProgressPlan plan;
  plan.duration = duration;
  plan.modes = shared.modes;
  if (duration <= absl::ZeroDuration()) {
    plan.rounds = shared.rounds;
    plan.total_steps = int64_t{sessions} * shared.steps_per_round *
                       static_cast<int64_t>(planned_phases);
  }
  if (absl::GetFlag(FLAGS_progress)) {
    progress = std::thread(ProgressLoop, &shared, &plan, &stop_progress, &phase);
  }
  for (std::thread& t : threads) t.join();
  stop_progress = true;
  if (progress.joinable()) progress.join();
  const int64_t total = int64_t{sessions} * shared.steps_per_round *
                        static_cast<int64_t>(phase_modes.size());

  int failed = 0;
  absl::MutexLock lock(&shared.mu);
  for (int i = 0; i < threads_count; ++i) {
    if (!setup_status[i].ok()) {
      if (failed++ == 0) {
        spdlog::error("{} {}: {}", batch > 1 ? "batch" : "session", i,
                      setup_status[i].ToString());
      }
      shared.failures.sessions_not_started[CodeName(setup_status[i].code())] +=
          batch;
    }
  }
  if (failed > 0) {
    spdlog::error("{} of {} {} failed to start", failed, threads_count,
                  batch > 1 ? "batches" : "sessions");
  }

  absl::Time previous = setup_end;
  for (size_t p = 0; p < phase_ends.size(); ++p) {
    shared.stats[phase_modes[p]].wall_seconds +=
        absl::ToDoubleSeconds(phase_ends[p] - previous);
    previous = phase_ends[p];
  }
  RunDescription run;
  run.target = target;
  run.shape = absl::StrFormat("layers=%d kv_heads=%d q_heads=%d head_dim=%d %s",
                              config.shape.layers, config.shape.kv_heads,
                              config.shape.q_heads, config.shape.head_dim,
                              ElementTypeName(config.shape.element_type));
  run.policy = PolicyName(config);
  run.budget = config.budget;
  run.sessions = sessions;
  run.prefill = prefill;
  run.rounds = static_cast<int>(phase_modes.size() / modes_per_round);
  run.steps_per_round = shared.steps_per_round;
  run.rate = absl::GetFlag(FLAGS_rate);
  run.client = client_kind;
  run.batch = batch;
  run.planned_steps = total;
  {
    SessionData sample = MakeData(config, 0, 1, 1, 1);
    v1::DecodeRequest r;
    FillStep("s-0000000000000000", 1000, kSlotBase + 1000, 1,
             sample.pool[0].key, sample.pool[0].query, sample.pool[0].entropy,
             r.add_steps());
    run.request_bytes = static_cast<int64_t>(r.ByteSizeLong());
  }
  const std::string report =
      absl::GetFlag(FLAGS_json)
          ? FormatJson(run, shared.stats, shared.failures)
          : FormatText(run, shared.stats, shared.failures);
  std::fputs(report.c_str(), stdout);
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_fail_on_error) &&
      AnyFailure(shared.stats, shared.failures)) {
    std::fprintf(stderr,
                 "entrokv-loadgen: failures (see the report); exit 1 "
                 "(--fail_on_error)\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace entrokv::loadgen

int main(int argc, char** argv) {
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
           {"Server", {"target", "tls_root_certs", "tls_cert", "tls_key",
                       "auth_token_file"}},
           {"Load",
            {"mode", "client", "sessions", "batch", "rounds",
             "steps_per_round", "duration", "rate", "prefill",
             "prefill_chunk", "pool", "seed"}},
           {"Session shape and policy",
            {"layers", "kv_heads", "q_heads", "head_dim", "dtype", "policy",
             "budget", "block_size", "block_summary", "placement", "sketch",
             "query_form", "decide_every"}},
           {"Deadlines", {"step_deadline", "create_deadline", "sync_timeout"}},
           {"Output", {"json", "progress", "fail_on_error", "log_level"}},
       }});
  if (absl::Status status = entrokv::InitLogging(); !status.ok()) {
    std::fprintf(stderr, "entrokv-loadgen: %s\n",
                 std::string(status.message()).c_str());
    return 2;
  }
  return entrokv::loadgen::Run();
}
