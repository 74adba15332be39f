// SessionRegistry: the server's sessions, by id, and who owns each.
//
// A session is created on a backend (CPU, or CUDA when the server has one),
// attached to at most one Decode stream at a time, and reclaimed when closed
// or when it has been detached for longer than the idle timeout (Reap()).
//
// Ownership and locking: the registry's map and each entry's attachment are
// guarded by one absl::Mutex, taken by create / close / get / list / attach /
// detach / reap — never per step — and never held while logging (a slow log
// sink must not stall other streams). While a stream holds a session (Attach()
// returned its entry) that stream alone calls the entry's SessionState, with no
// lock; after each step it publishes the session's stats into the entry's
// atomics (PublishStats()), which Get() / List() read. Close() only marks the
// entry closed and removes it from the map; the state is destroyed when the
// last holder (registry or stream) lets go of the entry. A stream that holds a
// closed entry detaches it at the next message it handles (see decode_stream.cc).
//
// Thread-safety: all methods are thread-safe. The backends must outlive the
// registry and every entry it handed out.

#ifndef ENTROKV_SERVER_SESSION_REGISTRY_H_
#define ENTROKV_SERVER_SESSION_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "entrokv/core/shadow.h"
#include "server/metrics.h"

namespace entrokv::server {

// A session's shadow policies (core/shadow.h), as its entry holds them.
// The reservation: the bytes the set may grow to, taken from the registry's
// server-wide --max_shadow_bytes when it was created and given back when
// the entry goes.
struct EntryShadows {
  EntryShadows() = default;
  EntryShadows(EntryShadows&& other) noexcept { *this = std::move(other); }
  EntryShadows& operator=(EntryShadows&& other) noexcept;
  ~EntryShadows();  // Gives the reservation back.

  std::unique_ptr<ShadowSet> set;
  std::atomic<int64_t>* reserved_total = nullptr;  // The registry's.
  int64_t reserved = 0;
  // The recall histograms of the session, the oracle and each shadow, in
  // StepRecall order; the attached stream fills them on first use.
  std::vector<DurationHistogram*> recall;
};

// One session. `state` is used only by the attached stream (see above).
class SessionEntry {
 public:
  SessionEntry(std::string id, std::unique_ptr<SessionState> state,
               BackendKind backend, EntryShadows shadows = {})
      : id_(std::move(id)),
        state_(std::move(state)),
        backend_(backend),
        shadows_(std::move(shadows)) {}

  const std::string& id() const { return id_; }
  BackendKind backend() const { return backend_; }
  const SessionConfig& config() const { return state_->config(); }

  // REQUIRES: the caller is the attached stream.
  SessionState& state() { return *state_; }
  // Null for a session without shadows. REQUIRES: the attached stream.
  EntryShadows* shadows() { return shadows_.set ? &shadows_ : nullptr; }

  // REQUIRES: the caller is the attached stream (or the entry is new).
  void PublishStats();
  // The stats last published; safe from any thread.
  SessionStats PublishedStats() const;
  // Likewise for the shadows' stats (nullopt: a session without shadows).
  void PublishShadowStats();
  std::optional<ShadowStats> PublishedShadowStats() const;

  bool closed() const { return closed_.load(std::memory_order_acquire); }

 private:
  friend class SessionRegistry;

  const std::string id_;
  const std::unique_ptr<SessionState> state_;
  const BackendKind backend_;
  EntryShadows shadows_;
  mutable absl::Mutex shadow_stats_mu_;
  std::optional<ShadowStats> shadow_stats_ ABSL_GUARDED_BY(shadow_stats_mu_);

  std::atomic<bool> closed_{false};
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_live_{0};
  std::atomic<int64_t> steps_{0};
  std::atomic<bool> has_last_step_{false};
  std::atomic<uint64_t> last_step_{0};
  std::atomic<int64_t> appended_{0};
  std::atomic<int64_t> evicted_{0};
  std::atomic<int64_t> tier_held_{0};
  std::atomic<int64_t> demoted_{0};
  std::atomic<int64_t> promoted_{0};
  std::atomic<int64_t> budget_{0};
  std::atomic<int64_t> bytes_held_{0};
  std::atomic<uint8_t> placement_{0};

  // Guarded by the registry's mutex.
  const void* owner_ = nullptr;  // The attached stream, or null.
  absl::Time detached_at_;       // Creation or last detach.
};

// What Get() / List() / Close() report.
struct SessionSnapshot {
  std::string id;
  SessionConfig config;
  SessionStats stats;
  bool attached = false;
  absl::Duration idle;  // Zero while attached.
  std::optional<ShadowStats> shadows;  // Nullopt: no shadows.
};

struct RegistryOptions {
  int64_t max_sessions = 0;      // 0: unlimited.
  int64_t max_live_entries = 0;  // Per session; 0: unlimited.
  absl::Duration idle_timeout = absl::Minutes(5);
  // Shadows per session (0: shadowing is off) and the bytes of one
  // session's reference (ShadowLimits).
  ShadowLimits shadow_limits;
  // What all sessions' shadowing may reserve together (ShadowSet's
  // reference at its capacity, its scratch and series); 0: unlimited.
  int64_t max_shadow_bytes = int64_t{1} << 30;
};

class SessionRegistry {
 public:
  // `gpu` may be null (no CUDA device). REQUIRES: cpu != nullptr.
  SessionRegistry(const RegistryOptions& options, Backend* cpu, Backend* gpu);
  ~SessionRegistry();

  SessionRegistry(const SessionRegistry&) = delete;
  SessionRegistry& operator=(const SessionRegistry&) = delete;

  // Creates a session, with the shadow policies of `shadowing` (empty: none;
  // its policies as proto::FromProto(Shadowing) read them for `config`).
  // `requested_id` empty: the registry picks one.
  // Errors: InvalidArgument (config, shadowing or id, naming the field),
  // AlreadyExists (id in use), FailedPrecondition (placement gpu without a
  // device and no fallback), ResourceExhausted (max sessions, a budget of
  // the session or of a shadow > max live entries, max_shadow_bytes
  // reached); more shadows than max_shadows is InvalidArgument.
  absl::StatusOr<SessionSnapshot> Create(const SessionConfig& config,
                                         const std::string& requested_id,
                                         bool placement_fallback,
                                         const ShadowRequest& shadowing = {});

  // Removes the session (NotFound when unknown); returns its last snapshot.
  absl::StatusOr<SessionSnapshot> Close(const std::string& id);

  absl::StatusOr<SessionSnapshot> Get(const std::string& id) const;
  // Whether a session of this id is open.
  bool Contains(const std::string& id) const;
  std::vector<SessionSnapshot> List() const;  // Ordered by id.

  // Makes `owner` the session's only stream. Attaching a session `owner`
  // already holds returns it again. Errors: NotFound, FailedPrecondition
  // (attached to another stream).
  absl::StatusOr<std::shared_ptr<SessionEntry>> Attach(const std::string& id,
                                                       const void* owner);
  // Releases the session if `owner` holds it; starts its idle clock.
  void Detach(SessionEntry& entry, const void* owner);

  // Reclaims sessions detached for longer than the idle timeout at `now`;
  // returns how many.
  int Reap(absl::Time now);

  int64_t size() const;
  const RegistryOptions& options() const { return options_; }
  bool gpu_available() const { return gpu_ != nullptr; }
  int64_t cpu_bytes_held() const { return cpu_->bytes_held(); }
  int64_t gpu_bytes_held() const { return gpu_ ? gpu_->bytes_held() : 0; }
  // Live entries of the open sessions, as of their last published step.
  int64_t live_entries() const;
  // Sessions created, closed (Close()) and reclaimed (Reap()) so far.
  int64_t created_total() const {
    return created_.load(std::memory_order_relaxed);
  }
  int64_t closed_total() const {
    return closed_.load(std::memory_order_relaxed);
  }
  int64_t reclaimed_total() const {
    return reclaimed_.load(std::memory_order_relaxed);
  }
  // Bytes the open sessions' shadowing has reserved (see max_shadow_bytes).
  int64_t shadow_bytes_reserved() const {
    return shadow_bytes_.load(std::memory_order_relaxed);
  }

 private:
  SessionSnapshot SnapshotLocked(const SessionEntry& entry,
                                 absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ResourceExhausted when max_sessions sessions are open.
  absl::Status CheckRoomLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The shadow set of a session of `config` (its effective config), its
  // bytes reserved. Errors as Create()'s, naming shadowing.*.
  absl::StatusOr<EntryShadows> CreateShadows(const SessionConfig& config,
                                             ShadowRequest request);

  const RegistryOptions options_;
  Backend* const cpu_;
  Backend* const gpu_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<SessionEntry>> sessions_
      ABSL_GUARDED_BY(mu_);
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> created_{0};
  std::atomic<int64_t> closed_{0};
  std::atomic<int64_t> reclaimed_{0};
  std::atomic<int64_t> shadow_bytes_{0};
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_SESSION_REGISTRY_H_
