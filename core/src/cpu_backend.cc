// The CPU backend: session state in host memory.
//
// Keys are stored in the session's element type, laid out
// [layer][kv_head][capacity][dim] (dim: Shape::vector_dim()) so that the
// scoring kernel streams each (layer, kv head) plane once. Live entries occupy
// positions 0..live-1; an eviction moves the last entry into the freed
// position, so removal costs O(evicted), not O(live). Append order is kept in
// each entry's append index.

#include "cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cpu_kernels.h"
#include "entrokv/core/backend.h"
#include "key_stats.h"
#include "layered_session.h"
#include "slot_table.h"
#include "step_common.h"

namespace entrokv::internal {
namespace {

class CpuSession final : public SessionState {
 public:
  CpuSession(const SessionConfig& config, const SessionLimits& limits,
             std::shared_ptr<ByteAccount> account)
      : config_(config),
        limits_(limits),
        account_(std::move(account)),
        budget_(config),
        esize_(static_cast<int64_t>(ElementSize(config.shape.element_type))),
        bytes_per_entry_(BytesPerEntry(config.shape)),
        counters_(config.budget) {}

  ~CpuSession() override { account_->Release(held() * bytes_per_entry_); }

  const SessionConfig& config() const override { return config_; }

  absl::Status Step(const StepInput& input, StepResult* result,
                    StepTrace* trace) override;

  SessionStats Stats() const override {
    // bytes_held counts every held entry: a demoted one's key and state stay
    // here (section 12).
    SessionStats s = counters_.ToStats(held(), table_.next_index(),
                                       bytes_per_entry_, Placement::kCpu);
    s.live = live();
    s.tier_held = tier_held_;
    s.demoted = demoted_;
    s.promoted = promoted_;
    return s;
  }

  std::vector<uint64_t> LiveSlots() const override {
    if (tier_held_ == 0) return table_.LiveSlots();
    return SlotsInTier(false);
  }
  std::vector<uint64_t> DemotedSlots() const override {
    if (tier_held_ == 0) return {};
    return SlotsInTier(true);
  }

 private:
  // Entries held: live ones and, with a demote tier, demoted ones, at
  // positions 0..held()-1.
  int64_t held() const { return table_.live(); }
  // Live (device) entries.
  int64_t live() const { return held() - tier_held_; }
  // The slot ids whose tier flag is `demoted`, in append order.
  std::vector<uint64_t> SlotsInTier(bool demoted) const {
    std::vector<uint64_t> out;
    for (int32_t p : table_.AppendOrder()) {
      if ((tier_[p] != 0) == demoted) out.push_back(table_.slots()[p]);
    }
    return out;
  }
  // Section 12, steps 4-7: selects and applies the step's moves, fills
  // `result`'s lists; returns the entries evicted for good.
  int64_t MoveTiers(int64_t budget, StepResult* result);
  // Grows key storage to hold `needed` entries; false when the allocation
  // fails (nothing changes then).
  bool Reserve(int64_t needed);
  // Appends the step's `n` validated entries, their affinity state set to
  // `state_init`.
  void Append(const StepInput& input, int64_t n, double state_init);
  // Scores every live entry with the step's queries as sent (`raw`, checked),
  // decoded and scaled by 1/sqrt(head_dim) in the same pass that sums them
  // per GQA group.
  void Score(const std::byte* raw, bool need_mean, bool need_attention);
  // protect_ of every held entry (section 7).
  void Protections();
  // keep_ of every held entry, with the step's ranking known at
  // compile time: rule::KeepScore's switch and the reads of the scores other
  // rankings use fold away, per entry. The same values as with the ranking
  // read at run time.
  template <Ranking kRanking>
  void KeepScores(rule::StepView view, bool need_attention);
  // KeepScores<view.ranking>, for the rankings kAllRankings[kAt...].
  template <size_t... kAt>
  void KeepScoresFor(const rule::StepView& view, bool need_attention,
                     std::index_sequence<kAt...>) {
    (void)((view.ranking == kAllRankings[kAt] &&
            (KeepScores<kAllRankings[kAt]>(view, need_attention), true)) ||
           ...);
  }
  // The expected ranking's e_i (section 3) from its query statistics.
  void ScoreExpected();
  // The scoring kernel's arguments for every live entry, with `queries`
  // (scaled) and z out to `z` (null: none), rows of stride held().
  ScoreArgs KeyScoreArgs(const float* queries, float* z) const {
    const Shape& s = config_.shape;
    return {.type = s.element_type,
            .keys = keys_.get(),
            .capacity = capacity_,
            .layers = s.layers,
            .kv_heads = s.kv_heads,
            .group = s.group_size(),
            .head_dim = s.vector_dim(),
            .live = held(),
            .queries = queries,
            .z = z,
            .z_stride = held()};
  }
  KeyPlanes Planes() const {
    const Shape& s = config_.shape;
    return {.type = s.element_type,
            .keys = keys_.get(),
            .capacity = capacity_,
            .planes = s.layers * s.kv_heads,
            .dim = s.vector_dim(),
            .live = held()};
  }
  void RemovePositions(std::vector<int32_t>* positions);
  std::byte* KeyAt(int32_t layer, int32_t kv, int64_t pos) {
    const Shape& s = config_.shape;
    return keys_.get() +
           ((int64_t{layer} * s.kv_heads + kv) * capacity_ + pos) *
               s.vector_dim() * esize_;
  }

  const SessionConfig config_;
  const SessionLimits limits_;
  const std::shared_ptr<ByteAccount> account_;
  BudgetController budget_;
  const int64_t esize_;
  const int64_t bytes_per_entry_;

  // Keys, [layer][kv_head][capacity_][dim] in the element type.
  std::unique_ptr<std::byte[]> keys_;
  int64_t capacity_ = 0;
  // Per position 0..live-1.
  // Slot ids, append indices, pinned flags; the compaction rule.
  SlotTable table_;
  std::vector<double> key_norm_;
  // Ω (seed) or its logit a (logit_ema); for the birth ranking, the entropy
  // the entry was born under (section 2).
  std::vector<double> affinity_;
  // birth: the entropy used by the last decision step, if any.
  std::optional<double> last_entropy_;
  std::vector<double> h2o_acc_;
  QueryStats query_stats_;  // expected.
  // Demote tier (section 12), per position when config_.tier.capacity > 0
  // (else empty): 1 for an entry in the tier.
  std::vector<uint8_t> tier_;
  int64_t tier_held_ = 0;
  int64_t demoted_ = 0;  // Moves answered, ever.
  int64_t promoted_ = 0;

  StepCounters counters_;

  // Scratch reused across steps.
  DecodedStep decoded_;
  std::vector<float> scaled_queries_;  // Per q head, for z (attention).
  std::vector<float> summed_queries_;  // Per kv head, for s_i.
  std::vector<float> z_;
  std::vector<double> mean_logit_;
  std::vector<double> attention_;
  std::vector<double> key_diff_;
  std::vector<double> redundancy_;  // rkv: R_i per position.
  std::vector<int32_t> rkv_rows_;
  RedundancyScratch rkv_scratch_;
  std::vector<double> expected_;
  std::vector<double> stats_scratch_;
  std::vector<float> expected_queries_;
  std::vector<float> expected_z_;
  std::vector<float> row_scratch_;
  std::vector<double> keep_;
  std::vector<uint8_t> protect_;
  std::vector<int64_t> index_scratch_;
  std::vector<int32_t> evict_;
  std::vector<SlotTable::Move> moves_;
  SelectionScratch selection_;
  TierScratch tier_scratch_;
  TierMoves tier_moves_;
};

template <Ranking kRanking>
void CpuSession::KeepScores(rule::StepView view, bool need_attention) {
  view.ranking = kRanking;
  const bool seed_rule = config_.affinity.update == AffinityUpdate::kSeed;
  const int64_t n = held();
  for (int64_t p = 0; p < n; ++p) {
    const int64_t index = table_.indices()[p];
    keep_[p] = rule::KeepScore(
        view,
        {.index = index,
         .key_norm = kRanking == Ranking::kKeyNorm ? key_norm_[p] : 0.0,
         .attention = need_attention ? attention_[p] : 0.0,
         .h2o_acc = kRanking == Ranking::kH2o ? h2o_acc_[p] : 0.0,
         .omega = kRanking == Ranking::kAffinity
                      ? rule::Omega(seed_rule, affinity_[p])
                      : 0.0,
         .key_diff = kRanking == Ranking::kKeyDiff ? key_diff_[p] : 0.0,
         .expected = kRanking == Ranking::kExpected ? expected_[p] : 0.0,
         .birth_entropy = kRanking == Ranking::kBirth ? affinity_[p] : 0.0,
         .redundancy = kRanking == Ranking::kRkv ? redundancy_[p] : 0.0});
  }
}

void CpuSession::Protections() {
  const int64_t n = held();
  // Locals: a store through uint8_t* may alias any member, which would be
  // read again for every entry.
  const int64_t sinks = config_.protection.sinks;
  const int64_t recent = config_.protection.recent;
  const int64_t next_index = table_.next_index();
  const int64_t* index = table_.indices().data();
  const uint8_t* pinned = table_.pinned().data();
  uint8_t* protect = protect_.data();
  for (int64_t p = 0; p < n; ++p) {
    protect[p] =
        rule::IsProtected(sinks, recent, index[p], next_index, pinned[p] != 0);
  }
}

bool CpuSession::Reserve(int64_t needed) {
  if (needed <= capacity_) return true;
  const Shape& s = config_.shape;
  const int64_t new_cap = std::max<int64_t>({needed, 2 * capacity_, 64});
  const int64_t row = int64_t{s.vector_dim()} * esize_;
  // Uninitialised: zero-filling a buffer of this size inside a step cost
  // about a second at 8k entries (4 layers x 8 kv heads x d 128).
  std::unique_ptr<std::byte[]> grown(
      new (std::nothrow) std::byte[static_cast<size_t>(
          int64_t{s.layers} * s.kv_heads * new_cap * row)]);
  if (grown == nullptr) return false;
  for (int64_t plane = 0; plane < int64_t{s.layers} * s.kv_heads; ++plane) {
    if (held() > 0) {
      std::memcpy(grown.get() + plane * new_cap * row,
                  keys_.get() + plane * capacity_ * row,
                  static_cast<size_t>(held() * row));
      counters_.bytes_copied += held() * row;
    }
  }
  keys_ = std::move(grown);
  capacity_ = new_cap;
  return true;
}

void CpuSession::Append(const StepInput& input, int64_t n,
                        double state_init) {
  const Shape& s = config_.shape;
  const int32_t d = s.vector_dim();
  const int64_t row = int64_t{d} * esize_;
  for (int64_t e = 0; e < n; ++e) {
    const int32_t pos = static_cast<int32_t>(held());
    const std::byte* src =
        input.append.keys.data() + e * s.key_elements() * esize_;
    double norm_sum = 0.0;
    for (int32_t l = 0; l < s.layers; ++l) {
      for (int32_t kv = 0; kv < s.kv_heads; ++kv) {
        const int64_t off = int64_t{l} * s.kv_heads + kv;
        std::memcpy(KeyAt(l, kv, pos), src + off * row,
                    static_cast<size_t>(row));
        if (config_.ranking != Ranking::kKeyNorm)
          continue;  // Only it reads norms.
        norm_sum += std::sqrt(SquaredNorm(s.element_type, src + off * row, d));
      }
    }
    counters_.bytes_copied += s.key_elements() * esize_;
    table_.Append(input.append.slot_ids[e],
                  !input.append.pinned.empty() && input.append.pinned[e] != 0);
    key_norm_.push_back(norm_sum /
                        static_cast<double>(int64_t{s.layers} * s.kv_heads));
    affinity_.push_back(state_init);
    h2o_acc_.push_back(0.0);
    if (config_.tier.capacity > 0) tier_.push_back(0);
  }
}

void CpuSession::Score(const std::byte* raw, bool need_mean,
                       bool need_attention) {
  const Shape& s = config_.shape;
  const int64_t n = held();
  // s_i and a_i average over every (layer, q head), whatever the query form.
  const int64_t rows = int64_t{s.layers} * s.q_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const double inv_rows = 1.0 / static_cast<double>(rows);
  // s_i needs only Σ_g q_g·k = (Σ_g q_g)·k over each GQA group: one dot
  // product per key and kv head instead of one per q head, and no z.
  // A kGroupSum query is that sum already (as sent, then scaled).
  const int32_t group =
      s.query_form == QueryForm::kGroupSum ? 1 : s.group_size();
  const int64_t d = s.vector_dim();
  const int64_t planes = int64_t{s.layers} * s.kv_heads;
  scaled_queries_.resize(
      need_attention ? static_cast<size_t>(planes * group * d) : 0);
  summed_queries_.resize(need_mean ? static_cast<size_t>(planes * d) : 0);
  PrepareQueries(s.element_type, raw, planes, group, d, scale,
                 need_attention ? scaled_queries_.data() : nullptr,
                 need_mean ? summed_queries_.data() : nullptr);
  counters_.bytes_copied += static_cast<int64_t>(
      (scaled_queries_.size() + summed_queries_.size()) * sizeof(float));
  if (need_mean) {
    mean_logit_.assign(static_cast<size_t>(n), 0.0);
    ScoreArgs summed = KeyScoreArgs(summed_queries_.data(), nullptr);
    summed.group = 1;
    summed.sum = mean_logit_.data();
    ScoreKeys(summed);
    for (double& v : mean_logit_) v *= inv_rows;
  }
  if (need_attention) {
    // The softmax needs every z[l,h,i].
    z_.resize(static_cast<size_t>(rows * n));
    ScoreKeys(KeyScoreArgs(scaled_queries_.data(), z_.data()));
    attention_.assign(static_cast<size_t>(n), 0.0);
    AccumulateSoftmax(z_.data(), rows, n, inv_rows, attention_.data());
  }
}

void CpuSession::ScoreExpected() {
  const Shape& s = config_.shape;
  const int64_t n = held();
  const int64_t rows = int64_t{s.layers} * s.q_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  // The μ term is section 3's logit with the float of μ as the query.
  const std::vector<double>& mean = query_stats_.mean();
  expected_queries_.resize(mean.size());
  for (size_t i = 0; i < mean.size(); ++i) {
    expected_queries_[i] = static_cast<float>(mean[i]) * scale;
  }
  expected_z_.resize(static_cast<size_t>(rows * n));
  ScoreKeys(KeyScoreArgs(expected_queries_.data(), expected_z_.data()));
  AddVarianceTerm(Planes(), s.group_size(), s.head_dim, query_stats_.var(),
                  expected_z_.data(), n, &row_scratch_);
  expected_.assign(static_cast<size_t>(n), 0.0);
  AccumulateSoftmax(expected_z_.data(), rows, n,
                    1.0 / static_cast<double>(rows), expected_.data());
}

void CpuSession::RemovePositions(std::vector<int32_t>* positions) {
  const Shape& s = config_.shape;
  const int64_t row = int64_t{s.vector_dim()} * esize_;
  table_.Remove(positions, &moves_);
  for (const SlotTable::Move& m : moves_) {
    for (int32_t l = 0; l < s.layers; ++l) {
      for (int32_t kv = 0; kv < s.kv_heads; ++kv) {
        std::memcpy(KeyAt(l, kv, m.dst), KeyAt(l, kv, m.src),
                    static_cast<size_t>(row));
      }
    }
    counters_.bytes_copied += int64_t{s.layers} * s.kv_heads * row;
    key_norm_[m.dst] = key_norm_[m.src];
    affinity_[m.dst] = affinity_[m.src];
    h2o_acc_[m.dst] = h2o_acc_[m.src];
    if (!tier_.empty()) tier_[m.dst] = tier_[m.src];
  }
  const size_t n = static_cast<size_t>(held());
  key_norm_.resize(n);
  affinity_.resize(n);
  h2o_acc_.resize(n);
  if (!tier_.empty()) tier_.resize(n);
}

absl::Status CpuSession::Step(const StepInput& input, StepResult* result,
                              StepTrace* trace) {
  const Ranking ranking = config_.ranking;
  const ScoreNeeds needs = StepScoreNeeds(config_, trace != nullptr);
  const bool need_mean = needs.mean;
  const bool need_attention = needs.attention;
  // Score reads the queries as sent; only the expected ranking's statistics
  // want them decoded (unscaled) on their own.
  StepRules rules = BackendStepRules(config_, needs);
  rules.decode_queries = ranking == Ranking::kExpected;
  absl::Status st =
      ValidateAndDecode(config_, limits_, counters_.last_step,
                        table_.live_slots(), held(), input, &decoded_, rules);
  if (!st.ok()) return st;
  const int64_t added_bytes = decoded_.appended * bytes_per_entry_;
  if (!account_->TryReserve(added_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "append: ", decoded_.appended, " entries (", added_bytes,
        " bytes) would exceed the backend's byte limit ", account_->limit()));
  }
  if (!Reserve(held() + decoded_.appended)) {
    account_->Release(added_bytes);
    return absl::ResourceExhaustedError(
        absl::StrCat("append: cannot allocate key storage for ",
                     held() + decoded_.appended, " entries"));
  }
  // Validated: from here on the step cannot fail.
  counters_.bytes_copied += decoded_.bytes_written;
  Append(input, decoded_.appended,
         ranking == Ranking::kBirth
             ? last_entropy_.value_or(decoded_.entropy)
             : (config_.affinity.update == AffinityUpdate::kSeed ? 0.5 : 0.0));
  last_entropy_ = decoded_.entropy;
  const int64_t n = held();
  if (ranking == Ranking::kExpected) {
    query_stats_.Update(decoded_.queries.data(), decoded_.queries.size(),
                        config_.expected.ema_rate);
  }
  if ((need_mean || need_attention) && decoded_.has_queries) {
    Score(input.queries.data(), need_mean, need_attention);
  } else if (trace != nullptr) {
    // keydiff reads no query: a step may come without one (section 1).
    mean_logit_.assign(static_cast<size_t>(n), 0.0);
    attention_.assign(static_cast<size_t>(n), 0.0);
  }

  const double h = decoded_.entropy;
  if (ranking == Ranking::kAffinity) {
    const double beta_h = config_.affinity.beta * h;
    const double lambda = config_.affinity.lambda;
    double* state = affinity_.data();
    const double* mean_logit = mean_logit_.data();
    // One loop per rule, so that the rule is not tested for every entry.
    auto update = [&](auto seed_rule) {
      for (int64_t p = 0; p < n; ++p) {
        state[p] = rule::UpdateAffinity(seed_rule, lambda, beta_h,
                                        mean_logit[p], state[p]);
      }
    };
    if (config_.affinity.update == AffinityUpdate::kSeed) {
      update(std::true_type{});
    } else {
      update(std::false_type{});
    }
  } else if (ranking == Ranking::kH2o) {
    for (int64_t p = 0; p < n; ++p) h2o_acc_[p] += attention_[p];
  }
  const int64_t budget = budget_.Next(h);

  // n counts every held entry; with a demote tier, those demoted too, which
  // were scored like live ones (section 12, step 1).
  const int64_t live_now = n - tier_held_;
  const int64_t need = live_now - budget;
  const std::optional<double> threshold = EvictionThreshold(config_);
  // Keep scores and protection matter only when something may be evicted or
  // promoted (or a trace shows them).
  const bool rank_now =
      need > 0 || threshold || trace != nullptr || tier_held_ > 0;
  rule::StepView view{.ranking = ranking,
                      .streaming_sinks = config_.streaming_sinks,
                      .h2o_recent_from = std::numeric_limits<int64_t>::max(),
                      .seed = config_.seed,
                      .step = input.step,
                      .birth_weight = config_.birth.weight,
                      .rkv_lambda = config_.rkv.lambda};
  if (rank_now && ranking == Ranking::kH2o) {
    view.h2o_recent_from = H2oRecentFrom(config_.h2o.recent_fraction, budget,
                                         table_.indices(), &index_scratch_);
  }
  if (rank_now && ranking == Ranking::kKeyDiff) {
    KeyDiffScores(Planes(), &key_diff_, &stats_scratch_, &row_scratch_);
  }
  if (rank_now && ranking == Ranking::kRkv) {
    RedundancyRows(table_.indices().data(), n, config_.rkv.sample, &rkv_rows_);
    RedundancyScores(Planes(), table_.indices().data(), rkv_rows_,
                     &redundancy_, &rkv_scratch_);
  }
  if (rank_now && ranking == Ranking::kExpected && n > 0) ScoreExpected();
  keep_.resize(static_cast<size_t>(n));
  protect_.resize(static_cast<size_t>(n));
  evict_.clear();
  // With logit_ema, Ω = σ(a) increases with a: a small selection can rank by
  // a and compute σ only near its boundary, not for every entry. When it
  // cannot show its answer is section 8's, every keep score is computed.
  auto selection = [&](absl::Span<const double> keep) {
    return SelectionInput{.keep = keep,
                          .index = table_.indices(),
                          .protect = protect_,
                          .next_index = table_.next_index(),
                          .need = need,
                          .threshold = threshold,
                          .block_size = config_.block_size,
                          .block_reduce = config_.block_reduce};
  };
  if (rank_now) Protections();
  bool selected = false;
  if (rank_now && ranking == Ranking::kAffinity &&
      config_.affinity.update == AffinityUpdate::kLogitEma &&
      trace == nullptr && config_.tier.capacity == 0) {
    selected = SelectEvictionsOfIncreasing(
        selection(affinity_),
        [](double a) { return rule::Omega(/*seed_rule=*/false, a); },
        &selection_, &evict_);
  }
  if (rank_now && !selected) {
    KeepScoresFor(view, need_attention,
                  std::make_index_sequence<std::size(kAllRankings)>());
  }
  if (trace != nullptr) {
    const std::vector<int32_t> order = table_.AppendOrder();
    trace->slots.clear();
    trace->mean_logit.clear();
    trace->attention.clear();
    trace->rank_score.clear();
    trace->protected_.clear();
    trace->demoted.clear();
    for (int32_t p : order) {
      if (!tier_.empty()) trace->demoted.push_back(tier_[p]);
      trace->slots.push_back(table_.slots()[p]);
      trace->mean_logit.push_back(static_cast<float>(mean_logit_[p]));
      trace->attention.push_back(
          need_attention ? static_cast<float>(attention_[p]) : 0.0f);
      trace->rank_score.push_back(keep_[p]);
      trace->protected_.push_back(protect_[p]);
    }
  }

  result->demoted.clear();
  result->promoted.clear();
  if (config_.tier.capacity > 0) {
    const int64_t evicted = MoveTiers(budget, result);
    counters_.Record(input.step, live_now, evicted, budget);
    result->live = live();
    result->budget = budget;
    result->entropy = h;
    result->deferred = false;
    return absl::OkStatus();
  }
  if (!selected) SelectEvictions(selection(keep_), &selection_, &evict_);
  // Answer in append order.
  table_.SortByAppendOrder(&evict_);
  result->evicted.clear();
  for (int32_t p : evict_) result->evicted.push_back(table_.slots()[p]);
  RemovePositions(&evict_);
  account_->Release(static_cast<int64_t>(result->evicted.size()) *
                    bytes_per_entry_);

  counters_.Record(input.step, n, static_cast<int64_t>(result->evicted.size()),
                   budget);
  result->live = live();
  result->budget = budget;
  result->entropy = h;
  result->deferred = false;
  return absl::OkStatus();
}

int64_t CpuSession::MoveTiers(int64_t budget, StepResult* result) {
  SelectTierMoves({.keep = keep_,
                   .index = table_.indices(),
                   .protect = protect_,
                   .demoted = tier_,
                   .live = live(),
                   .budget = budget,
                   .params = config_.tier},
                  &tier_scratch_, &tier_moves_);
  // Answer in append order.
  table_.SortByAppendOrder(&tier_moves_.demote);
  table_.SortByAppendOrder(&tier_moves_.promote);
  table_.SortByAppendOrder(&tier_moves_.evict);
  const std::vector<uint64_t>& slots = table_.slots();
  for (int32_t p : tier_moves_.demote) {
    result->demoted.push_back(slots[p]);
    tier_[p] = 1;
  }
  for (int32_t p : tier_moves_.promote) {
    result->promoted.push_back(slots[p]);
    tier_[p] = 0;
  }
  // Every entry evicted is in the tier now (or was demoted and dropped by
  // this step, never flagged).
  int64_t from_tier = 0;
  result->evicted.clear();
  for (int32_t p : tier_moves_.evict) {
    result->evicted.push_back(slots[p]);
    from_tier += tier_[p];
  }
  const int64_t demoted = static_cast<int64_t>(tier_moves_.demote.size());
  const int64_t promoted = static_cast<int64_t>(tier_moves_.promote.size());
  const int64_t evicted = static_cast<int64_t>(tier_moves_.evict.size());
  // Entries demoted and dropped by this step were live at its start.
  tier_held_ += demoted - promoted - from_tier;
  demoted_ += demoted;
  promoted_ += promoted;
  RemovePositions(&tier_moves_.evict);
  account_->Release(evicted * bytes_per_entry_);
  return evicted;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options)
      : account_(std::make_shared<ByteAccount>(options.max_bytes)) {}

  BackendKind kind() const override { return BackendKind::kCpu; }
  std::string Describe() const override {
    return absl::StrCat("cpu (", ScoreKernelName(), " kernel)");
  }
  int64_t bytes_held() const override { return account_->held(); }

  absl::StatusOr<std::unique_ptr<SessionState>> CreateSession(
      const SessionConfig& config, const SessionLimits& limits) override {
    if (absl::Status st = ValidateSessionConfig(config); !st.ok()) return st;
    return CreateLayeredSession(
        config, limits, account_,
        [&](const SessionConfig& c, const SessionLimits& l) {
          return std::make_unique<CpuSession>(c, l, account_);
        });
  }

 private:
  std::shared_ptr<ByteAccount> account_;
};

}  // namespace

bool ByteAccount::TryReserve(int64_t bytes) {
  int64_t held = held_.load(std::memory_order_relaxed);
  do {
    if (limit_ > 0 && held + bytes > limit_) return false;
  } while (!held_.compare_exchange_weak(held, held + bytes,
                                        std::memory_order_relaxed));
  return true;
}

std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace entrokv::internal
