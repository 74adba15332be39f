#include "layered_session.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cpu_backend.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/status_macros.h"
#include "step_common.h"

namespace entrokv::internal {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status ByteLimitError(int64_t entries, int64_t bytes, int64_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat("append: ", entries, " entries (", bytes,
                   " bytes) would exceed the backend's byte limit ", limit));
}

void ClearTrace(StepTrace* trace) {
  if (trace == nullptr) return;
  trace->slots.clear();
  trace->mean_logit.clear();
  trace->attention.clear();
  trace->rank_score.clear();
  trace->protected_.clear();
  trace->demoted.clear();
}

// ---------------------------------------------------------------------------
// CadenceLayer (section 11).

class CadenceLayer final : public SessionState {
 public:
  CadenceLayer(const SessionConfig& config, const SessionLimits& limits,
               std::shared_ptr<ByteAccount> account,
               std::unique_ptr<SessionState> inner)
      : config_(config),
        limits_(limits),
        account_(std::move(account)),
        inner_(std::move(inner)),
        bytes_per_entry_(BytesPerEntry(config.shape)) {}

  ~CadenceLayer() override { account_->Release(PendingBytes()); }

  const SessionConfig& config() const override { return config_; }

  absl::Status Step(const StepInput& input, StepResult* result,
                    StepTrace* trace) override;

  SessionStats Stats() const override {
    SessionStats s = inner_->Stats();
    const int64_t pending = static_cast<int64_t>(pending_ids_.size());
    s.live += pending;
    s.appended += pending;
    s.bytes_held += PendingBytes();
    s.bytes_copied += bytes_copied_;
    s.peak_live = peak_live_;
    s.steps = steps_;
    s.last_step = last_step_;
    return s;
  }

  std::vector<uint64_t> LiveSlots() const override {
    std::vector<uint64_t> out = inner_->LiveSlots();
    out.insert(out.end(), pending_ids_.begin(), pending_ids_.end());
    return out;
  }

  // Pending entries are live: the tier changes only at decisions.
  std::vector<uint64_t> DemotedSlots() const override {
    return inner_->DemotedSlots();
  }

 private:
  int64_t PendingBytes() const {
    return static_cast<int64_t>(pending_ids_.size()) * bytes_per_entry_;
  }

  const SessionConfig config_;
  const SessionLimits limits_;
  const std::shared_ptr<ByteAccount> account_;
  const std::unique_ptr<SessionState> inner_;
  const int64_t bytes_per_entry_;

  // Entries appended since the last decision, in append order.
  std::vector<uint64_t> pending_ids_;
  std::vector<uint8_t> pending_pinned_;
  std::vector<std::byte> pending_keys_;
  bool pending_any_pinned_ = false;
  // Held slots of the whole stack (below, demoted ones included, and
  // pending), for validation.
  absl::flat_hash_set<uint64_t> live_slots_;
  // Entries in the demote tier below, as of the last decision (section 12).
  int64_t tier_held_ = 0;
  int64_t steps_ = 0;
  int64_t peak_live_ = 0;
  std::optional<uint64_t> last_step_;

  // Scratch.
  DecodedStep decoded_;
  int64_t bytes_copied_ = 0;  // SessionStats::bytes_copied, this layer's.
};

namespace {

// "every accepted step" for 1, else "every Kth accepted step" with K's
// English ordinal: 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 101st, 111th.
std::string EveryKth(int64_t k) {
  if (k == 1) return "every accepted step";
  const int64_t tens = k % 100;
  const int64_t ones = k % 10;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th"
                       : ones == 1                ? "st"
                       : ones == 2                ? "nd"
                       : ones == 3                ? "rd"
                                                  : "th";
  return absl::StrCat("every ", k, suffix, " accepted step");
}

}  // namespace

absl::Status CadenceLayer::Step(const StepInput& input, StepResult* result,
                                StepTrace* trace) {
  const int64_t n = static_cast<int64_t>(input.append.slot_ids.size());
  // Held entries, and the live (device) ones: a demote tier's entries are
  // held but not live (section 12).
  const int64_t held = static_cast<int64_t>(live_slots_.size());
  const int64_t live = held - tier_held_;
  const bool scheduled = (steps_ + 1) % config_.decide_every == 0;
  const bool forced =
      config_.hard_ceiling > 0 && live + n > config_.hard_ceiling;
  const bool decide = scheduled || forced;
  if (decide && input.queries.empty() && RankingNeedsQueries(config_.ranking) &&
      (!last_step_.has_value() || input.step == *last_step_ + 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queries: required, step ", input.step, " is a decision step (",
        scheduled ? absl::StrCat(EveryKth(config_.decide_every), " decides")
                  : absl::StrCat(live, " live + ", n,
                                 " appended entries pass hard_ceiling ",
                                 config_.hard_ceiling),
        ")"));
  }
  ENTROKV_RETURN_IF_ERROR(ValidateAndDecode(
      config_, limits_, last_step_, live_slots_, held, input, &decoded_,
      {.consecutive = true, .decision = decide, .decode_queries = false}));

  if (!decide) {
    const int64_t bytes = n * bytes_per_entry_;
    if (!account_->TryReserve(bytes)) {
      return ByteLimitError(n, bytes, account_->limit());
    }
    // Validated and reserved: from here on the step cannot fail.
    for (int64_t e = 0; e < n; ++e) {
      const uint64_t id = input.append.slot_ids[e];
      const bool pinned =
          !input.append.pinned.empty() && input.append.pinned[e] != 0;
      pending_ids_.push_back(id);
      pending_pinned_.push_back(pinned ? 1 : 0);
      pending_any_pinned_ |= pinned;
      live_slots_.insert(id);
    }
    pending_keys_.insert(pending_keys_.end(), input.append.keys.begin(),
                         input.append.keys.end());
    bytes_copied_ += decoded_.bytes_written +
                     static_cast<int64_t>(input.append.keys.size());
    ++steps_;
    last_step_ = input.step;
    peak_live_ = std::max(peak_live_, live + n);
    result->evicted.clear();
    result->demoted.clear();
    result->promoted.clear();
    result->live = live + n;
    result->budget = inner_->Stats().budget;
    result->entropy = decoded_.has_entropy ? decoded_.entropy : 0.0;
    result->deferred = true;
    ClearTrace(trace);
    return absl::OkStatus();
  }

  // A decision: everything appended since the last one goes below as one
  // append, older entries first. The step's entries join the pending ones in
  // place (taken back if the layer below rejects the step), so each key is
  // copied once on its way down.
  StepInput below = input;
  const size_t pending_entries = pending_ids_.size();
  const size_t pending_key_bytes = pending_keys_.size();
  const bool pending_pinned = pending_any_pinned_;
  if (pending_entries > 0) {
    pending_ids_.insert(pending_ids_.end(), input.append.slot_ids.begin(),
                        input.append.slot_ids.end());
    pending_keys_.insert(pending_keys_.end(), input.append.keys.begin(),
                         input.append.keys.end());
    if (input.append.pinned.empty()) {
      pending_pinned_.resize(pending_ids_.size(), 0);
    } else {
      pending_pinned_.insert(pending_pinned_.end(), input.append.pinned.begin(),
                             input.append.pinned.end());
    }
    below.append.slot_ids = pending_ids_;
    below.append.keys = pending_keys_;
    below.append.pinned = pending_pinned || !input.append.pinned.empty()
                              ? absl::Span<const uint8_t>(pending_pinned_)
                              : absl::Span<const uint8_t>();
  }
  const int64_t pending_bytes =
      static_cast<int64_t>(pending_entries) * bytes_per_entry_;
  // The layer below reserves every entry it takes, pending ones included.
  account_->Release(pending_bytes);
  if (absl::Status st = inner_->Step(below, result, trace); !st.ok()) {
    account_->Restore(pending_bytes);
    pending_ids_.resize(pending_entries);
    pending_pinned_.resize(pending_entries);
    pending_keys_.resize(pending_key_bytes);
    return st;
  }
  result->deferred = false;
  bytes_copied_ += decoded_.bytes_written +
                   static_cast<int64_t>(pending_keys_.size() - pending_key_bytes);
  for (uint64_t id : input.append.slot_ids) live_slots_.insert(id);
  for (uint64_t id : result->evicted) live_slots_.erase(id);
  if (config_.tier.capacity > 0) tier_held_ = inner_->Stats().tier_held;
  pending_ids_.clear();
  pending_pinned_.clear();
  pending_keys_.clear();
  pending_any_pinned_ = false;
  ++steps_;
  last_step_ = input.step;
  peak_live_ = std::max(peak_live_, live + n);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// BlockSummaryLayer (section 10).

class BlockSummaryLayer final : public SessionState {
 public:
  BlockSummaryLayer(const SessionConfig& config, const SessionLimits& limits,
                    std::shared_ptr<ByteAccount> account,
                    std::unique_ptr<SessionState> inner)
      : config_(config),
        limits_(limits),
        account_(std::move(account)),
        inner_(std::move(inner)),
        block_(config.block_size),
        bytes_per_entry_(BytesPerEntry(config.shape)),
        key_elements_(config.shape.key_elements()) {}

  ~BlockSummaryLayer() override { account_->Release(PartialBytes()); }

  const SessionConfig& config() const override { return config_; }

  absl::Status Step(const StepInput& input, StepResult* result,
                    StepTrace* trace) override;

  SessionStats Stats() const override {
    SessionStats s = inner_->Stats();
    s.live = live_tokens();
    s.peak_live = peak_live_;
    s.appended = appended_;
    s.evicted = evicted_;
    s.budget = s.budget * block_;
    s.bytes_held += PartialBytes();
    s.bytes_copied += bytes_copied_;
    return s;
  }

  std::vector<uint64_t> LiveSlots() const override {
    std::vector<uint64_t> out;
    for (uint64_t b : inner_->LiveSlots()) {
      const std::vector<uint64_t>& ids = block_ids_.at(b);
      out.insert(out.end(), ids.begin(), ids.end());
    }
    out.insert(out.end(), partial_ids_.begin(), partial_ids_.end());
    return out;
  }

 private:
  int64_t partial() const { return static_cast<int64_t>(partial_ids_.size()); }
  int64_t live_tokens() const {
    return static_cast<int64_t>(live_slots_.size());
  }
  int64_t PartialBytes() const { return partial() * bytes_per_entry_; }

  const SessionConfig config_;
  const SessionLimits limits_;
  const std::shared_ptr<ByteAccount> account_;
  const std::unique_ptr<SessionState> inner_;
  const int64_t block_;
  const int64_t bytes_per_entry_;
  const int64_t key_elements_;

  // The current partial block: its tokens' ids, pinned flags, decoded keys.
  std::vector<uint64_t> partial_ids_;
  std::vector<uint8_t> partial_pinned_;
  std::vector<float> partial_keys_;
  // Token ids of each live full block, by block number (the slot id below).
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> block_ids_;
  uint64_t next_block_ = 0;
  absl::flat_hash_set<uint64_t> live_slots_;  // Live token ids.
  int64_t appended_ = 0;
  int64_t evicted_ = 0;
  int64_t peak_live_ = 0;

  // Scratch.
  DecodedStep decoded_;
  int64_t bytes_copied_ = 0;  // SessionStats::bytes_copied, this layer's.
  std::vector<uint64_t> token_ids_;
  std::vector<uint8_t> token_pinned_;
  std::vector<float> mean_;
  std::vector<uint64_t> new_blocks_;
  std::vector<uint8_t> new_pinned_;
  std::vector<std::byte> new_keys_;
  StepTrace inner_trace_;
};

absl::Status BlockSummaryLayer::Step(const StepInput& input, StepResult* result,
                                     StepTrace* trace) {
  const SessionStats below_stats = inner_->Stats();
  ENTROKV_RETURN_IF_ERROR(ValidateAndDecode(
      config_, limits_, below_stats.last_step, live_slots_, live_tokens(),
      input, &decoded_,
      {.consecutive = BackendStepRules(config_, {}).consecutive,
       .decision = true,
       .decode_queries = false}));
  const int64_t n = decoded_.appended;

  // Partial + new tokens, in append order; every full block goes below.
  token_ids_.assign(partial_ids_.begin(), partial_ids_.end());
  token_ids_.insert(token_ids_.end(), input.append.slot_ids.begin(),
                    input.append.slot_ids.end());
  token_pinned_.assign(partial_pinned_.begin(), partial_pinned_.end());
  for (int64_t e = 0; e < n; ++e) {
    token_pinned_.push_back(
        !input.append.pinned.empty() && input.append.pinned[e] != 0 ? 1 : 0);
  }
  // The new tokens' keys, decoded once, after the partial block's (taken
  // back if the step fails).
  const size_t partial_floats = partial_keys_.size();
  partial_keys_.resize(partial_floats + static_cast<size_t>(n * key_elements_));
  DecodeElements(config_.shape.element_type, input.append.keys.data(),
                 static_cast<size_t>(n * key_elements_),
                 partial_keys_.data() + partial_floats);
  const int64_t total = static_cast<int64_t>(token_ids_.size());
  const int64_t full = total / block_;
  const int64_t rest = total - full * block_;

  const ElementType type = config_.shape.element_type;
  const int64_t esize = static_cast<int64_t>(ElementSize(type));
  new_blocks_.clear();
  new_pinned_.clear();
  new_keys_.resize(static_cast<size_t>(full * key_elements_ * esize));
  mean_.resize(static_cast<size_t>(key_elements_));
  bool any_pinned = false;
  for (int64_t b = 0; b < full; ++b) {
    // The block's mean key, summed in double, then rounded to the element
    // type like any key the engine sends.
    for (int64_t j = 0; j < key_elements_; ++j) {
      double sum = 0.0;
      for (int64_t t = 0; t < block_; ++t) {
        sum += partial_keys_[(b * block_ + t) * key_elements_ + j];
      }
      mean_[j] = static_cast<float>(sum / static_cast<double>(block_));
    }
    EncodeElements(type, mean_.data(), mean_.size(),
                   new_keys_.data() + b * key_elements_ * esize);
    uint8_t pinned = 0;
    for (int64_t t = 0; t < block_; ++t)
      pinned |= token_pinned_[b * block_ + t];
    any_pinned |= pinned != 0;
    new_blocks_.push_back(next_block_ + static_cast<uint64_t>(b));
    new_pinned_.push_back(pinned);
  }

  // The partial block's bytes change by (rest - partial) entries; the layer
  // below reserves the new blocks itself.
  const int64_t delta = (rest - partial()) * bytes_per_entry_;
  if (delta > 0 && !account_->TryReserve(delta)) {
    partial_keys_.resize(partial_floats);
    return ByteLimitError(n, delta, account_->limit());
  }
  StepInput below = input;
  below.append.slot_ids = new_blocks_;
  below.append.pinned = any_pinned ? absl::Span<const uint8_t>(new_pinned_)
                                   : absl::Span<const uint8_t>();
  below.append.keys = new_keys_;
  StepTrace* below_trace = trace != nullptr ? &inner_trace_ : nullptr;
  if (absl::Status st = inner_->Step(below, result, below_trace); !st.ok()) {
    if (delta > 0) account_->Release(delta);
    partial_keys_.resize(partial_floats);
    return st;
  }
  if (delta < 0) account_->Release(-delta);

  // Committed below: record the new blocks and the new partial block.
  for (int64_t b = 0; b < full; ++b) {
    block_ids_[next_block_ + static_cast<uint64_t>(b)].assign(
        token_ids_.begin() + b * block_, token_ids_.begin() + (b + 1) * block_);
  }
  next_block_ += static_cast<uint64_t>(full);
  partial_ids_.assign(token_ids_.begin() + full * block_, token_ids_.end());
  partial_pinned_.assign(token_pinned_.begin() + full * block_,
                         token_pinned_.end());
  partial_keys_.erase(partial_keys_.begin(),
                      partial_keys_.begin() + full * block_ * key_elements_);
  // The new tokens decoded; each full block's mean in float and in the
  // element type; when blocks went below, the rest moved to the front.
  bytes_copied_ +=
      (n * key_elements_ +
       (full > 0 ? static_cast<int64_t>(partial_keys_.size()) : 0)) *
          static_cast<int64_t>(sizeof(float)) +
      full * key_elements_ * (static_cast<int64_t>(sizeof(float)) + esize);
  for (uint64_t id : input.append.slot_ids) live_slots_.insert(id);
  appended_ += n;
  peak_live_ = std::max(peak_live_, live_tokens());

  if (trace != nullptr) {
    // Per token: its block's values; partial-block tokens are never
    // candidates (rank +inf, protected).
    ClearTrace(trace);
    for (size_t i = 0; i < inner_trace_.slots.size(); ++i) {
      for (uint64_t id : block_ids_.at(inner_trace_.slots[i])) {
        trace->slots.push_back(id);
        trace->mean_logit.push_back(inner_trace_.mean_logit[i]);
        trace->attention.push_back(inner_trace_.attention[i]);
        trace->rank_score.push_back(inner_trace_.rank_score[i]);
        trace->protected_.push_back(inner_trace_.protected_[i]);
      }
    }
    for (uint64_t id : partial_ids_) {
      trace->slots.push_back(id);
      trace->mean_logit.push_back(0.0f);
      trace->attention.push_back(0.0f);
      trace->rank_score.push_back(std::numeric_limits<double>::infinity());
      trace->protected_.push_back(1);
    }
  }

  // Evicted blocks (in append order) become their tokens (in append order).
  std::vector<uint64_t> blocks = std::move(result->evicted);
  result->evicted.clear();
  for (uint64_t b : blocks) {
    auto it = block_ids_.find(b);
    for (uint64_t id : it->second) {
      result->evicted.push_back(id);
      live_slots_.erase(id);
    }
    block_ids_.erase(it);
  }
  evicted_ += static_cast<int64_t>(result->evicted.size());
  result->live = live_tokens();
  result->budget *= block_;

  return absl::OkStatus();
}

}  // namespace

SessionConfig BlockSummaryInnerConfig(const SessionConfig& config) {
  const int64_t n = config.block_size;
  SessionConfig c = config;
  c.block_size = 1;
  c.block_summary = false;
  c.budget = std::max<int64_t>(1, config.budget / n);
  EntropyBudgetParams& e = c.entropy_budget;
  e.min_budget =
      std::min(CeilDiv(config.entropy_budget.min_budget, n), c.budget);
  e.max_budget = config.entropy_budget.max_budget == 0
                     ? 0
                     : std::max(c.budget, config.entropy_budget.max_budget / n);
  c.streaming_sinks = CeilDiv(config.streaming_sinks, n);
  c.protection.sinks = CeilDiv(config.protection.sinks, n);
  c.protection.recent = CeilDiv(config.protection.recent, n);
  // The cadence layer above counts tokens against the ceiling.
  c.hard_ceiling = 0;
  return c;
}

std::unique_ptr<SessionState> CreateLayeredSession(
    const SessionConfig& config, const SessionLimits& limits,
    std::shared_ptr<ByteAccount> account,
    absl::FunctionRef<std::unique_ptr<SessionState>(const SessionConfig&,
                                                    const SessionLimits&)>
        make_inner) {
  std::unique_ptr<SessionState> session;
  if (config.block_summary) {
    // Limits count tokens, which only the layer sees.
    session = std::make_unique<BlockSummaryLayer>(
        config, limits, account,
        make_inner(BlockSummaryInnerConfig(config), SessionLimits{}));
  } else {
    session = make_inner(config, limits);
  }
  if (config.decide_every > 1) {
    session = std::make_unique<CadenceLayer>(config, limits, account,
                                             std::move(session));
  }
  return session;
}

}  // namespace entrokv::internal
