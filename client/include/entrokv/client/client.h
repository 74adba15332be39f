// Client: an inference engine's handle on an entrokv sidecar.
//
// A Client holds one gRPC channel to a target ("127.0.0.1:50051",
// "unix:/run/entrokv/entrokv.sock", any gRPC target string) and makes the
// unary calls: create, attach, inspect, list and close sessions. Each Session
// it creates runs its own Decode stream over the shared channel (see
// session.h). Connect() does not wait for the server: an unreachable server
// surfaces as UNAVAILABLE on the first call, or as an offline Session.
// CreateSession and Attach wait at most SessionOptions::create_deadline;
// GetSession, ListSessions and CloseSession at most
// ClientOptions::rpc_deadline.
//
// Thread-safety: a Client is thread-safe; any number of threads may create
// and use sessions at once. Sessions may outlive their Client.

#ifndef ENTROKV_CLIENT_CLIENT_H_
#define ENTROKV_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "entrokv/client/batch.h"
#include "entrokv/client/metrics.h"
#include "entrokv/client/session.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"

namespace entrokv {

// Writes `line` and a newline to standard error: ClientOptions::log's
// default.
void LogToStderr(std::string_view line);

// The sidecar's default address: its unix socket.
inline constexpr char kDefaultTarget[] = "unix:/run/entrokv/entrokv.sock";

// The target a ClientOptions starts with: the environment variable
// ENTROKV_TARGET when it is set and not empty, else kDefaultTarget.
std::string DefaultTarget();

struct ClientOptions {
  // Left as constructed ("unset"), DefaultTarget(): the deployment's
  // ENTROKV_TARGET, else kDefaultTarget. An engine that assigns it overrides
  // the environment. (Session step deadlines come from the environment the
  // same way: SessionOptions::step_deadline.)
  std::string target = DefaultTarget();
  // Transport security. With tls_root_certs_file (PEM CA certificates that
  // verify the server) the channel uses TLS; add tls_cert_file and
  // tls_key_file (PEM) to present a client certificate (mutual TLS). The
  // server's certificate must name the target's host (DNS or IP SAN).
  // Empty: plaintext (unix sockets, loopback).
  std::string tls_root_certs_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Non-empty: every call (unary and Decode streams) carries the metadata
  // "authorization: Bearer <bearer_token>" (the server's --auth_token_file).
  std::string bearer_token;
  // Deadline of GetSession, ListSessions and CloseSession, and of the
  // background close of a session whose attach failed. (CreateSession,
  // Attach and Session::Close() use SessionOptions::create_deadline.)
  absl::Duration rpc_deadline = absl::Seconds(5);
  // Largest message sent or received; raise it for long prefill chunks.
  int32_t max_message_bytes = 64 << 20;
  // Reconnection of the channel after the server went away (gRPC's
  // subchannel backoff; gRPC's own defaults are 1 s, 120 s and 20 s, which
  // leave new sessions offline for seconds to minutes after a sidecar
  // restart). After a failed connect the next attempt waits
  // reconnect_initial_backoff, each following one 1.6 times longer, up to
  // reconnect_max_backoff; gRPC adds a fixed +-20 % jitter to each wait.
  // With the defaults a restarted sidecar is connected again at most
  // 300 ms after it listens, whatever the length of the outage; the cost is
  // one failed connect every 250 ms while it is away (docs/engines.md,
  // "Recovery after an outage").
  // Each attempt may take connect_timeout at least (a port that accepts and
  // never answers holds one attempt that long). gRPC raises each value
  // below 100 ms to 100 ms. Connect() rejects values that are not positive
  // and a max below the initial backoff.
  absl::Duration reconnect_initial_backoff = absl::Milliseconds(100);
  absl::Duration reconnect_max_backoff = absl::Milliseconds(250);
  absl::Duration connect_timeout = absl::Seconds(1);
  // Where the library writes one line when a session loses the sidecar
  // (degrades), is created offline, or is decided by the sidecar again;
  // each of the three at most once per 10 s per Client, the next one saying
  // how many were held back, so that an outage is seen without flooding the
  // engine's log. Null: nothing is written (the counters count either way).
  std::function<void(std::string_view)> log = LogToStderr;
};

// A session as the server describes it.
struct SessionInfo {
  std::string id;
  SessionConfig config;   // Effective: defaults filled in.
  SessionStats stats;     // live, peak, budget, steps, bytes held, placement.
  bool attached = false;  // A Decode stream owns it now.
  absl::Duration idle;    // Since it was last detached (0 while attached).
  // Its shadow policies' measures (SessionOptions::shadowing); nullopt for a
  // session without shadows. As of the last step whose shadow work the
  // server has run: every step answered before the latest reply.
  std::optional<ShadowStats> shadows;
};

struct ServerInfo {
  int64_t sessions = 0;
  int64_t max_sessions = 0;  // 0: unlimited (likewise below).
  int64_t bytes_held = 0;
  int64_t max_bytes = 0;
  int64_t gpu_bytes_held = 0;
  int64_t max_gpu_bytes = 0;
  int64_t max_live_entries = 0;
  bool gpu_available = false;
  int64_t max_shadows = 0;  // Per session; 0: shadowing is off.
  int64_t max_shadow_reference_bytes = 0;
};

class Client {
 public:
  // Creates the channel; does not contact the server.
  // Errors: InvalidArgument for an empty target, a bad reconnect setting, a
  // client certificate without its key (or without tls_root_certs_file), or
  // a malformed ENTROKV_STEP_DEADLINE_MS; NotFound / PermissionDenied for a
  // PEM file that cannot be read.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const ClientOptions& options);

  virtual ~Client() = default;

  virtual const ClientOptions& options() const = 0;

  // The sum of the counters of every session this client created or
  // attached, closed and destroyed ones included: one set of metrics for the
  // engine to export (a non-zero fallback_steps means the sidecar is down or
  // too slow for the step deadline; offline_sessions, recovery_attempts and
  // recoveries say how creations and recoveries fared).
  virtual SessionCounters counters() const = 0;
  // counters() and the histograms of step latency, for an engine to export
  // (MetricsText() renders them in the Prometheus text format; metrics.h).
  virtual ClientMetrics metrics() const = 0;

  // Creates a server session (`session_id` empty: the server names it) and
  // attaches a Decode stream to it, within options.create_deadline. With
  // options.offline_when_unavailable (the default), a failure that is not
  // the caller's -- unreachable or silent server, RESOURCE_EXHAUSTED at a
  // server limit (e.g. max_sessions), INTERNAL, a failed attach after a
  // successful create -- yields an offline Session (empty id, degraded()
  // from the start, degraded_reason() saying why; session.h). Errors: the
  // caller's (InvalidArgument naming a bad config field, AlreadyExists for a
  // taken id, FailedPrecondition for a GPU placement the server cannot
  // give, Unauthenticated for a missing or wrong bearer_token); without
  // offline_when_unavailable, every failure.
  virtual absl::StatusOr<std::unique_ptr<Session>> CreateSession(
      const SessionConfig& config, const SessionOptions& options = {},
      std::string_view session_id = {}) = 0;

  // Attaches to an existing session, e.g. after the engine's stream broke,
  // within options.create_deadline. The next step is the server's last step
  // + 1 (options.first_step when it has none). `live_slots` are the slots
  // the engine still holds for it, in append order: the local fallback can
  // only evict entries it knows of. They count as unpinned (there is no
  // argument for pinned flags): the local rule may evict an entry the server
  // had pinned, and a recovery re-sends it unpinned. Attach
  // never fails open (without the server it does not know the session's
  // configuration). Errors: NotFound (unknown or reclaimed),
  // FailedPrecondition (attached to another live stream), and the
  // server-side failures (Unavailable, DeadlineExceeded, ...).
  virtual absl::StatusOr<std::unique_ptr<Session>> Attach(
      std::string_view session_id, const SessionOptions& options = {},
      absl::Span<const uint64_t> live_slots = {}) = 0;

  virtual absl::StatusOr<SessionInfo> GetSession(
      std::string_view session_id) = 0;
  // Every session, ordered by id; `server` (optional) receives usage/limits.
  virtual absl::StatusOr<std::vector<SessionInfo>> ListSessions(
      ServerInfo* server = nullptr) = 0;
  // Closes a session by id and frees its state. Errors: NotFound.
  virtual absl::Status CloseSession(std::string_view session_id) = 0;

  // A batch of sessions that step together, one message per decode
  // iteration (batch.h). Opens its stream; does not wait for the server.
  // `api` chooses the stream implementation as SessionOptions::stream_api.
  virtual std::unique_ptr<DecodeBatch> CreateBatch(
      StreamApi api = StreamApi::kSync) = 0;
};

}  // namespace entrokv

#endif  // ENTROKV_CLIENT_CLIENT_H_
