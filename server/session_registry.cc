#include "server/session_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/log_format.h"
#include "server/status_conversion.h"
#include "spdlog/spdlog.h"

namespace entrokv::server {
namespace {

constexpr size_t kMaxSessionIdLength = 128;

absl::Status ValidateSessionId(const std::string& id) {
  if (id.size() > kMaxSessionIdLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("session_id: longer than ", kMaxSessionIdLength,
                     " characters (", id.size(), ")"));
  }
  for (const char c : id) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          "session_id: only printable ASCII characters without spaces are "
          "allowed");
    }
  }
  return absl::OkStatus();
}

}  // namespace

EntryShadows& EntryShadows::operator=(EntryShadows&& other) noexcept {
  if (this == &other) return *this;
  if (reserved_total != nullptr) {
    reserved_total->fetch_sub(reserved, std::memory_order_relaxed);
  }
  set = std::move(other.set);
  reserved_total = std::exchange(other.reserved_total, nullptr);
  reserved = std::exchange(other.reserved, 0);
  recall = std::move(other.recall);
  return *this;
}

EntryShadows::~EntryShadows() {
  if (reserved_total != nullptr) {
    reserved_total->fetch_sub(reserved, std::memory_order_relaxed);
  }
}

void SessionEntry::PublishShadowStats() {
  if (shadows_.set == nullptr) return;
  ShadowStats stats = shadows_.set->Stats();
  absl::MutexLock lock(&shadow_stats_mu_);
  shadow_stats_ = std::move(stats);
}

std::optional<ShadowStats> SessionEntry::PublishedShadowStats() const {
  absl::MutexLock lock(&shadow_stats_mu_);
  return shadow_stats_;
}

void SessionEntry::PublishStats() {
  const SessionStats stats = state_->Stats();
  live_.store(stats.live, std::memory_order_relaxed);
  peak_live_.store(stats.peak_live, std::memory_order_relaxed);
  steps_.store(stats.steps, std::memory_order_relaxed);
  if (stats.last_step.has_value()) {
    last_step_.store(*stats.last_step, std::memory_order_relaxed);
    has_last_step_.store(true, std::memory_order_relaxed);
  }
  appended_.store(stats.appended, std::memory_order_relaxed);
  evicted_.store(stats.evicted, std::memory_order_relaxed);
  tier_held_.store(stats.tier_held, std::memory_order_relaxed);
  demoted_.store(stats.demoted, std::memory_order_relaxed);
  promoted_.store(stats.promoted, std::memory_order_relaxed);
  budget_.store(stats.budget, std::memory_order_relaxed);
  bytes_held_.store(stats.bytes_held, std::memory_order_relaxed);
  placement_.store(static_cast<uint8_t>(stats.placement),
                   std::memory_order_release);
}

SessionStats SessionEntry::PublishedStats() const {
  SessionStats stats;
  stats.placement =
      static_cast<Placement>(placement_.load(std::memory_order_acquire));
  stats.live = live_.load(std::memory_order_relaxed);
  stats.peak_live = peak_live_.load(std::memory_order_relaxed);
  stats.steps = steps_.load(std::memory_order_relaxed);
  if (has_last_step_.load(std::memory_order_relaxed)) {
    stats.last_step = last_step_.load(std::memory_order_relaxed);
  }
  stats.appended = appended_.load(std::memory_order_relaxed);
  stats.evicted = evicted_.load(std::memory_order_relaxed);
  stats.tier_held = tier_held_.load(std::memory_order_relaxed);
  stats.demoted = demoted_.load(std::memory_order_relaxed);
  stats.promoted = promoted_.load(std::memory_order_relaxed);
  stats.budget = budget_.load(std::memory_order_relaxed);
  stats.bytes_held = bytes_held_.load(std::memory_order_relaxed);
  return stats;
}

SessionRegistry::SessionRegistry(const RegistryOptions& options, Backend* cpu,
                                 Backend* gpu)
    : options_(options), cpu_(cpu), gpu_(gpu) {}

SessionRegistry::~SessionRegistry() {
  absl::MutexLock lock(&mu_);
  sessions_.clear();
}

absl::StatusOr<EntryShadows> SessionRegistry::CreateShadows(
    const SessionConfig& config, ShadowRequest request) {
  const ShadowLimits& limits = options_.shadow_limits;
  const int64_t given = static_cast<int64_t>(request.policies.size());
  if (given > limits.max_shadows) {
    // InvalidArgument, not ResourceExhausted: no retry can succeed, and a
    // client must not take it for a passing shortage and go offline.
    return absl::InvalidArgumentError(absl::StrCat(
        "shadowing.policies: ", given, " given, more than the server's limit "
        "of ", limits.max_shadows, " per session (--max_shadows)"));
  }
  for (size_t i = 0; i < request.policies.size(); ++i) {
    SessionConfig& shadow = request.policies[i];
    shadow.scored_layers = config.scored_layers;  // The effective ones.
    if (options_.max_live_entries > 0 &&
        shadow.budget > options_.max_live_entries) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "shadowing.policies[", i, "].budget: ", shadow.budget,
          " exceeds the server's limit of live entries per session (",
          options_.max_live_entries, ")"));
    }
  }
  absl::StatusOr<ShadowOptions> resolved =
      ResolveShadowOptions(config, request, limits);
  if (!resolved.ok()) return PrefixMessage("shadowing.", resolved.status());

  const int64_t reserve = ShadowBytesAtMost(config, *resolved);
  const int64_t before =
      shadow_bytes_.fetch_add(reserve, std::memory_order_relaxed);
  EntryShadows shadows;
  shadows.reserved_total = &shadow_bytes_;  // Given back when `shadows` goes.
  shadows.reserved = reserve;
  if (options_.max_shadow_bytes > 0 &&
      before + reserve > options_.max_shadow_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shadowing: ", reserve, " bytes of shadowing would take the server "
        "past its limit of ", options_.max_shadow_bytes,
        " (--max_shadow_bytes; ", before, " reserved); ask for fewer "
        "max_reference_entries"));
  }
  absl::StatusOr<std::unique_ptr<ShadowSet>> set =
      ShadowSet::Create(config, *resolved, cpu_);
  if (!set.ok()) {
    return absl::IsInvalidArgument(set.status())
               ? PrefixMessage("shadowing.", set.status())
               : set.status();
  }
  shadows.set = *std::move(set);
  return shadows;
}

absl::StatusOr<SessionSnapshot> SessionRegistry::Create(
    const SessionConfig& requested, const std::string& requested_id,
    bool placement_fallback, const ShadowRequest& shadowing) {
  if (absl::Status status = ValidateSessionId(requested_id); !status.ok()) {
    return status;
  }
  if (absl::Status status = ValidateSessionConfig(requested); !status.ok()) {
    return PrefixMessage("config.", status);
  }
  if (options_.max_live_entries > 0 &&
      requested.budget > options_.max_live_entries) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "config.budget: ", requested.budget,
        " exceeds the server's limit of live entries per session (",
        options_.max_live_entries, ")"));
  }

  // Placement: gpu needs a device (or the fallback); auto prefers the device.
  // A device that cannot run the configuration answers UNIMPLEMENTED at
  // creation (the CUDA backend: a demote tier): then auto, and gpu with the
  // fallback, place the session on the CPU; gpu alone returns the refusal.
  SessionConfig config = requested;
  Backend* backend = cpu_;
  bool cpu_if_unimplemented = false;
  switch (requested.placement) {
    case Placement::kCpu:
      break;
    case Placement::kGpu:
      if (gpu_ != nullptr) {
        backend = gpu_;
        cpu_if_unimplemented = placement_fallback;
      } else if (!placement_fallback) {
        return absl::FailedPreconditionError(
            "config.placement: gpu requested but this server has no CUDA "
            "device (set placement_fallback to place the session on the CPU)");
      }
      break;
    case Placement::kAuto:
      if (gpu_ != nullptr) {
        backend = gpu_;
        cpu_if_unimplemented = true;
      }
      break;
  }
  // The effective config says what is in force: unset, the sent layers are
  // the model's first shape.layers (the proto's scored_layers comment).
  if (config.scored_layers.empty()) {
    for (int32_t l = 0; l < config.shape.layers; ++l) {
      config.scored_layers.push_back(l);
    }
  }

  {
    absl::MutexLock lock(&mu_);
    if (absl::Status room = CheckRoomLocked(); !room.ok()) return room;
    if (!requested_id.empty() && sessions_.contains(requested_id)) {
      return absl::AlreadyExistsError(
          absl::StrCat("session_id: ", requested_id, " is already in use"));
    }
  }

  SessionLimits limits;
  limits.max_live_entries = options_.max_live_entries;
  config.placement = backend == cpu_ ? Placement::kCpu : Placement::kGpu;
  absl::StatusOr<std::unique_ptr<SessionState>> state =
      backend->CreateSession(config, limits);
  if (!state.ok() && absl::IsUnimplemented(state.status()) &&
      cpu_if_unimplemented) {
    backend = cpu_;
    config.placement = Placement::kCpu;
    state = backend->CreateSession(config, limits);
  }
  if (!state.ok()) {
    if (absl::IsInvalidArgument(state.status()) ||
        absl::IsUnimplemented(state.status())) {
      return PrefixMessage("config.", state.status());
    }
    return state.status();
  }
  EntryShadows shadows;
  if (!shadowing.empty()) {
    absl::StatusOr<EntryShadows> created = CreateShadows(config, shadowing);
    if (!created.ok()) return created.status();
    shadows = *std::move(created);
  }

  SessionSnapshot snapshot;
  {
    absl::MutexLock lock(&mu_);
    // Checked again: another Create() may have run meanwhile.
    if (absl::Status room = CheckRoomLocked(); !room.ok()) return room;
    std::string id = requested_id;
    if (id.empty()) {
      do {
        id = absl::StrFormat("s-%016x", absl::Uniform<uint64_t>(bitgen_));
      } while (sessions_.contains(id));
    } else if (sessions_.contains(id)) {
      return absl::AlreadyExistsError(
          absl::StrCat("session_id: ", id, " is already in use"));
    }
    auto entry = std::make_shared<SessionEntry>(
        id, *std::move(state), backend->kind(), std::move(shadows));
    entry->PublishStats();
    entry->PublishShadowStats();
    const absl::Time now = absl::Now();
    entry->detached_at_ = now;
    sessions_.emplace(id, entry);
    snapshot = SnapshotLocked(*entry, now);
  }
  created_.fetch_add(1, std::memory_order_relaxed);
  // Logged after unlocking, from the snapshot (the entry may be closed by
  // now).
  const ScopedLogFields fields(snapshot.id);
  spdlog::info(
      "session {} opened: {} budget {} shape {}x{}x{}x{} {} on {}{}",
      snapshot.id, PolicyName(snapshot.config), snapshot.config.budget,
      config.shape.layers, config.shape.q_heads, config.shape.kv_heads,
      config.shape.head_dim, ElementTypeName(config.shape.element_type),
      BackendKindName(backend->kind()),
      snapshot.shadows.has_value()
          ? absl::StrCat(", ", snapshot.shadows->shadows.size(), " shadows")
          : "");
  return snapshot;
}

absl::StatusOr<SessionSnapshot> SessionRegistry::Close(const std::string& id) {
  std::shared_ptr<SessionEntry> entry;
  SessionSnapshot snapshot;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(
          absl::StrCat("session_id: no open session ", id));
    }
    entry = std::move(it->second);
    sessions_.erase(it);
    entry->closed_.store(true, std::memory_order_release);
    snapshot = SnapshotLocked(*entry, absl::Now());
  }
  closed_.fetch_add(1, std::memory_order_relaxed);
  const ScopedLogFields fields(id);
  spdlog::info("session {} closed: {} steps, peak {} live", id,
               snapshot.stats.steps, snapshot.stats.peak_live);
  // `entry` is released here, outside the lock; if a stream still holds it,
  // the state goes when that stream lets go.
  return snapshot;
}

absl::StatusOr<SessionSnapshot> SessionRegistry::Get(
    const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("session_id: no open session ", id));
  }
  return SnapshotLocked(*it->second, absl::Now());
}

std::vector<SessionSnapshot> SessionRegistry::List() const {
  std::vector<SessionSnapshot> out;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    out.reserve(sessions_.size());
    for (const auto& [id, entry] : sessions_) {
      out.push_back(SnapshotLocked(*entry, now));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const SessionSnapshot& a, const SessionSnapshot& b) {
              return a.id < b.id;
            });
  return out;
}

absl::StatusOr<std::shared_ptr<SessionEntry>> SessionRegistry::Attach(
    const std::string& id, const void* owner) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("session_id: no open session ", id));
  }
  SessionEntry& entry = *it->second;
  if (entry.owner_ != nullptr && entry.owner_ != owner) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session_id: session ", id,
        " is attached to another stream; retry when that stream has ended"));
  }
  entry.owner_ = owner;
  return it->second;
}

void SessionRegistry::Detach(SessionEntry& entry, const void* owner) {
  absl::MutexLock lock(&mu_);
  if (entry.owner_ != owner) return;
  entry.owner_ = nullptr;
  entry.detached_at_ = absl::Now();
}

bool SessionRegistry::Contains(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  return sessions_.contains(id);
}

int SessionRegistry::Reap(absl::Time now) {
  std::vector<std::shared_ptr<SessionEntry>> reaped;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      SessionEntry& entry = *it->second;
      if (entry.owner_ == nullptr &&
          now - entry.detached_at_ > options_.idle_timeout) {
        entry.closed_.store(true, std::memory_order_release);
        reaped.push_back(std::move(it->second));
        sessions_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  reclaimed_.fetch_add(static_cast<int64_t>(reaped.size()),
                       std::memory_order_relaxed);
  for (const auto& entry : reaped) {
    const ScopedLogFields fields(entry->id());
    spdlog::info("session {} reclaimed after {} idle", entry->id(),
                 absl::FormatDuration(options_.idle_timeout));
  }
  return static_cast<int>(reaped.size());
}

int64_t SessionRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(sessions_.size());
}

int64_t SessionRegistry::live_entries() const {
  absl::MutexLock lock(&mu_);
  int64_t live = 0;
  for (const auto& [id, entry] : sessions_) {
    live += entry->live_.load(std::memory_order_relaxed);
  }
  return live;
}

absl::Status SessionRegistry::CheckRoomLocked() const {
  if (options_.max_sessions > 0 &&
      static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sessions: the server's limit of ", options_.max_sessions,
                     " open sessions is reached"));
  }
  return absl::OkStatus();
}

SessionSnapshot SessionRegistry::SnapshotLocked(const SessionEntry& entry,
                                                absl::Time now) const {
  SessionSnapshot snapshot;
  snapshot.id = entry.id();
  snapshot.config = entry.config();
  snapshot.stats = entry.PublishedStats();
  snapshot.attached = entry.owner_ != nullptr;
  snapshot.idle =
      snapshot.attached ? absl::ZeroDuration() : now - entry.detached_at_;
  snapshot.shadows = entry.PublishedShadowStats();
  return snapshot;
}

}  // namespace entrokv::server
