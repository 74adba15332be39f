#include "entrokv/core/shadow.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/element_type.h"
#include "cpu_kernels.h"

namespace entrokv {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

bool SameShape(const Shape& a, const Shape& b) {
  return a.layers == b.layers && a.kv_heads == b.kv_heads &&
         a.q_heads == b.q_heads && a.head_dim == b.head_dim &&
         a.element_type == b.element_type && a.sketch_dim == b.sketch_dim &&
         a.query_form == b.query_form;
}

absl::Status ValidateOptions(const SessionConfig& primary,
                             const ShadowOptions& o) {
  if (o.max_reference_entries < 1) {
    return Bad("max_reference_entries",
               absl::StrCat(o.max_reference_entries, " is below 1"));
  }
  if (o.score_every < 1) {
    return Bad("score_every", absl::StrCat(o.score_every, " is below 1"));
  }
  if (static_cast<int64_t>(o.policies.size()) > o.max_shadows) {
    return Bad("policies", absl::StrCat(o.policies.size(), " given, at most ",
                                       o.max_shadows));
  }
  for (size_t i = 0; i < o.policies.size(); ++i) {
    const SessionConfig& s = o.policies[i];
    const std::string at = absl::StrCat("policies[", i, "]");
    if (absl::Status st = ValidateSessionConfig(s); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ".", st.message()));
    }
    if (!SameShape(s.shape, primary.shape)) {
      return Bad(absl::StrCat(at, ".shape"), "differs from the session's");
    }
    if (s.decide_every != primary.decide_every) {
      return Bad(absl::StrCat(at, ".decide_every"),
                 absl::StrCat(s.decide_every, " differs from the session's ",
                              primary.decide_every));
    }
    if (s.hard_ceiling != primary.hard_ceiling) {
      return Bad(absl::StrCat(at, ".hard_ceiling"),
                 absl::StrCat(s.hard_ceiling, " differs from the session's ",
                              primary.hard_ceiling));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShadowOptions> ResolveShadowOptions(
    const SessionConfig& primary, const ShadowRequest& request,
    const ShadowLimits& limits) {
  if (request.score_every < 1) {
    return Bad("score_every", absl::StrCat(request.score_every, " is below 1"));
  }
  if (request.max_reference_entries < 0) {
    return Bad("max_reference_entries",
               absl::StrCat(request.max_reference_entries, " is below 0"));
  }
  const int64_t entry_bytes =
      primary.shape.key_elements() * static_cast<int64_t>(sizeof(float));
  const int64_t most = limits.max_reference_bytes / entry_bytes;
  if (most < 1) {
    return Bad("max_reference_bytes",
               absl::StrCat("the server's ", limits.max_reference_bytes,
                            " bytes hold no key of this shape (", entry_bytes,
                            " bytes each)"));
  }
  ShadowOptions options;
  options.policies = request.policies;
  options.max_shadows = limits.max_shadows;
  options.score_every = request.score_every;
  options.max_reference_entries =
      request.max_reference_entries == 0
          ? most
          : std::min(request.max_reference_entries, most);
  return options;
}

int64_t ShadowBytesAtMost(const SessionConfig& primary,
                          const ShadowOptions& options) {
  const int64_t cap = options.max_reference_entries;
  const int64_t series = 2 + static_cast<int64_t>(options.policies.size());
  // Per entry: its key (f32); a_i (a double) and one layer's logits (a float
  // per query head); per series value a double, up to twice over while its
  // vector doubles.
  const int64_t per_entry =
      primary.shape.key_elements() * int64_t{sizeof(float)} +
      int64_t{sizeof(double)} +
      primary.shape.query_heads() * int64_t{sizeof(float)} +
      2 * series * int64_t{sizeof(double)};
  return cap * per_entry +
         primary.shape.query_elements() * int64_t{sizeof(float)};
}

namespace {

// Recall values over the scored steps (at most max_reference_entries of
// them: Observe stops scoring there).
class RecallSeries {
 public:
  void Add(double r) { values_.push_back(r); }
  int64_t bytes() const {
    return static_cast<int64_t>(values_.capacity() * sizeof(double));
  }
  RecallSummary Summary() const {
    RecallSummary s;
    s.steps = static_cast<int64_t>(values_.size());
    if (values_.empty()) return s;
    std::vector<double> sorted = values_;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0.0;
    for (double v : values_) sum += v;
    s.mean = sum / static_cast<double>(values_.size());
    s.min = sorted.front();
    // Nearest rank: the ceil(0.1 n)-th smallest.
    const size_t rank = static_cast<size_t>(
        std::ceil(0.1 * static_cast<double>(sorted.size())));
    s.p10 = sorted[std::max<size_t>(rank, 1) - 1];
    return s;
  }

 private:
  std::vector<double> values_;
};

struct Shadow {
  SessionConfig config;
  std::unique_ptr<SessionState> state;
  absl::Status status;
  RecallSeries recall;
  double jaccard_sum = 0.0;
};

class ShadowSetImpl final : public ShadowSet {
 public:
  ShadowSetImpl(const SessionConfig& primary, const ShadowOptions& options,
                std::unique_ptr<Backend> own_backend, Backend* backend)
      : primary_(primary),
        options_(options),
        own_backend_(std::move(own_backend)),
        backend_(backend != nullptr ? backend : own_backend_.get()) {}

  absl::Status Init() {
    for (const SessionConfig& c : options_.policies) {
      absl::StatusOr<std::unique_ptr<SessionState>> state =
          backend_->CreateSession(c, {});
      if (!state.ok()) return state.status();
      Shadow shadow;
      shadow.config = c;
      shadow.state = *std::move(state);
      shadows_.push_back(std::move(shadow));
    }
    return absl::OkStatus();
  }

  bool Observe(const StepInput& input, const StepResult& result,
               StepRecall* scored) override;
  ShadowStats Stats() const override;
  int64_t bytes_held() const override;

 private:
  void Append(const StepInput& input);
  void StepShadows(const StepInput& input);
  // a_i over the reference for this step's queries.
  void Attention(const StepInput& input);
  double Recall(absl::Span<const uint64_t> virtual_ids) const;
  // The recall of the top `budget` entries by a_i. Reorders attention_.
  double OracleRecall(int64_t budget);

  const SessionConfig primary_;
  const ShadowOptions options_;
  const std::unique_ptr<Backend> own_backend_;  // Null with a given backend.
  Backend* const backend_;
  std::vector<Shadow> shadows_;

  uint64_t next_virtual_ = 0;
  absl::flat_hash_map<uint64_t, uint64_t> primary_live_;  // Slot -> virtual.
  // The primary's entries in its demote tier (docs/step-semantics.md section
  // 12): held, not live, so not in its recall.
  absl::flat_hash_map<uint64_t, uint64_t> primary_demoted_;
  std::vector<uint64_t> step_virtual_;  // The step's appends, virtual ids.
  // The keys, f32, laid out [layer][kv_head][reference_capacity_][dim] as
  // the scoring kernel reads them; reference_entries_ of them held.
  std::vector<float> reference_;
  int64_t reference_entries_ = 0;
  int64_t reference_capacity_ = 0;
  bool reference_full_ = false;
  int64_t steps_observed_ = 0;
  int64_t steps_with_queries_ = 0;
  int64_t steps_scored_ = 0;
  RecallSeries primary_recall_;
  RecallSeries oracle_recall_;

  std::vector<float> queries_;
  std::vector<double> attention_;  // a_i, per reference entry.
  std::vector<float> z_;  // One layer's logits, [q head][entry].
  std::vector<uint64_t> primary_ids_;             // Scratch, per scored step.
  absl::flat_hash_set<uint64_t> primary_set_;     // Scratch, per scored step.
};

void ShadowSetImpl::Append(const StepInput& input) {
  const Shape& shape = primary_.shape;
  const int64_t n = static_cast<int64_t>(input.append.slot_ids.size());
  step_virtual_.clear();
  for (int64_t e = 0; e < n; ++e) {
    step_virtual_.push_back(next_virtual_++);
  }
  if (reference_entries_ + n > options_.max_reference_entries) {
    reference_full_ = true;
  }
  if (reference_full_ || n == 0) return;
  const int64_t ke = shape.key_elements();
  const int64_t blocks = int64_t{shape.layers} * shape.kv_heads;
  const int32_t d = shape.vector_dim();
  const int64_t needed = reference_entries_ + n;
  if (needed > reference_capacity_) {
    // Doubling, never past the cap (so the bytes held stay within
    // max_reference_entries keys), each (layer, kv head) block moved.
    const int64_t capacity =
        std::min(options_.max_reference_entries,
                 std::max(needed, 2 * reference_capacity_));
    std::vector<float> grown(static_cast<size_t>(blocks * capacity * d));
    for (int64_t b = 0; b < blocks; ++b) {
      std::copy_n(reference_.data() + b * reference_capacity_ * d,
                  reference_entries_ * d, grown.data() + b * capacity * d);
    }
    reference_ = std::move(grown);
    reference_capacity_ = capacity;
  }
  // Decoded straight into place, one (entry, layer, kv head) vector at a
  // time.
  const size_t esize = ElementSize(shape.element_type);
  for (int64_t e = 0; e < n; ++e) {
    for (int64_t b = 0; b < blocks; ++b) {
      DecodeElements(
          shape.element_type,
          input.append.keys.data() + static_cast<size_t>(e * ke + b * d) * esize,
          static_cast<size_t>(d),
          reference_.data() +
              (b * reference_capacity_ + reference_entries_ + e) * d);
    }
  }
  reference_entries_ += n;
}

void ShadowSetImpl::StepShadows(const StepInput& input) {
  StepInput shadow_input = input;
  shadow_input.append.slot_ids = step_virtual_;
  StepResult result;
  for (Shadow& s : shadows_) {
    if (!s.status.ok()) continue;
    s.status = s.state->Step(shadow_input, &result);
  }
}

void ShadowSetImpl::Attention(const StepInput& input) {
  const Shape& shape = primary_.shape;
  const int64_t n = reference_entries_;
  const int32_t d = shape.vector_dim();
  const int32_t heads = shape.query_heads();
  const int32_t group =
      shape.query_form == QueryForm::kGroupSum ? 1 : shape.group_size();
  const float scale =
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
  queries_.resize(static_cast<size_t>(shape.query_elements()));
  internal::PrepareQueries(shape.element_type, input.queries.data(),
                           int64_t{shape.layers} * shape.kv_heads, group, d,
                           scale, queries_.data(), /*summed=*/nullptr);
  attention_.assign(static_cast<size_t>(n), 0.0);
  z_.resize(static_cast<size_t>(int64_t{heads} * n));
  const double weight = 1.0 / (static_cast<double>(shape.layers) * heads);
  // One layer at a time: the logits scratch is one layer's.
  for (int32_t l = 0; l < shape.layers; ++l) {
    internal::ScoreArgs args;
    args.type = ElementType::kF32;
    args.keys = reinterpret_cast<const std::byte*>(
        reference_.data() +
        int64_t{l} * shape.kv_heads * reference_capacity_ * d);
    args.capacity = reference_capacity_;
    args.layers = 1;
    args.kv_heads = shape.kv_heads;
    args.group = group;
    args.head_dim = d;
    args.live = n;
    args.queries = queries_.data() + int64_t{l} * heads * d;
    args.z = z_.data();
    args.z_stride = n;
    internal::ScoreKeys(args);
    internal::AccumulateSoftmax(z_.data(), heads, n, weight,
                                attention_.data());
  }
}

double ShadowSetImpl::Recall(absl::Span<const uint64_t> virtual_ids) const {
  double r = 0.0;
  for (uint64_t v : virtual_ids) {
    if (v < attention_.size()) r += attention_[v];
  }
  return r;
}

double ShadowSetImpl::OracleRecall(int64_t budget) {
  const size_t keep = std::min(attention_.size(),
                               static_cast<size_t>(std::max<int64_t>(0, budget)));
  // A selection, not a sort: the top `keep` in any order.
  std::nth_element(attention_.begin(), attention_.begin() + keep,
                   attention_.end(), std::greater<double>());
  double r = 0.0;
  for (size_t i = 0; i < keep; ++i) r += attention_[i];
  return r;
}

double Jaccard(const std::vector<uint64_t>& a,
               const absl::flat_hash_set<uint64_t>& b) {
  int64_t both = 0;
  for (uint64_t v : a) both += b.contains(v) ? 1 : 0;
  const int64_t either = static_cast<int64_t>(a.size() + b.size()) - both;
  return either == 0 ? 1.0 : static_cast<double>(both) / either;
}

bool ShadowSetImpl::Observe(const StepInput& input, const StepResult& result,
                            StepRecall* scored) {
  ++steps_observed_;
  Append(input);
  for (size_t e = 0; e < step_virtual_.size(); ++e) {
    primary_live_[input.append.slot_ids[e]] = step_virtual_[e];
  }
  // The moves are net and disjoint (section 12), so their order is free.
  for (uint64_t slot : result.demoted) {
    primary_demoted_.insert(primary_live_.extract(slot));
  }
  for (uint64_t slot : result.promoted) {
    primary_live_.insert(primary_demoted_.extract(slot));
  }
  for (uint64_t slot : result.evicted) {
    primary_live_.erase(slot);
    primary_demoted_.erase(slot);
  }
  StepShadows(input);
  if (steps_scored_ == options_.max_reference_entries) reference_full_ = true;
  if (input.queries.empty() || reference_full_ || reference_entries_ == 0) {
    return false;
  }
  if (steps_with_queries_++ % options_.score_every != 0) return false;
  ++steps_scored_;

  Attention(input);
  primary_ids_.clear();
  primary_set_.clear();
  for (const auto& [slot, v] : primary_live_) {
    primary_ids_.push_back(v);
    primary_set_.insert(v);
  }
  const double primary = Recall(primary_ids_);
  primary_recall_.Add(primary);
  if (scored != nullptr) {
    scored->primary = primary;
    scored->shadows.clear();
  }
  for (Shadow& s : shadows_) {
    double recall = std::numeric_limits<double>::quiet_NaN();
    if (s.status.ok()) {
      const std::vector<uint64_t> live = s.state->LiveSlots();
      recall = Recall(live);
      s.recall.Add(recall);
      s.jaccard_sum += Jaccard(live, primary_set_);
    }
    if (scored != nullptr) scored->shadows.push_back(recall);
  }
  // Last: it reorders attention_, which the recalls above index.
  const double oracle = OracleRecall(result.budget);
  oracle_recall_.Add(oracle);
  if (scored != nullptr) scored->oracle = oracle;
  return true;
}

int64_t ShadowSetImpl::bytes_held() const {
  // The reference, the per-entry scratch of Attention() and the recall
  // series.
  int64_t bytes =
      static_cast<int64_t>(reference_.capacity() * sizeof(float) +
                           attention_.capacity() * sizeof(double) +
                           z_.capacity() * sizeof(float) +
                           queries_.capacity() * sizeof(float));
  bytes += primary_recall_.bytes() + oracle_recall_.bytes();
  for (const Shadow& s : shadows_) bytes += s.recall.bytes();
  for (const Shadow& s : shadows_) bytes += s.state->Stats().bytes_held;
  return bytes;
}

ShadowStats ShadowSetImpl::Stats() const {
  ShadowStats stats;
  stats.primary.policy = PolicyName(primary_);
  stats.primary.config = primary_;
  stats.oracle.config = primary_;
  stats.primary.recall = primary_recall_.Summary();
  stats.primary.live = static_cast<int64_t>(primary_live_.size());
  stats.oracle.policy = "oracle";
  stats.oracle.recall = oracle_recall_.Summary();
  stats.oracle.mean_jaccard = 0.0;
  for (const Shadow& s : shadows_) {
    PolicyReport r;
    r.policy = PolicyName(s.config);
    r.config = s.config;
    r.recall = s.recall.Summary();
    r.mean_jaccard = r.recall.steps > 0
                         ? s.jaccard_sum / static_cast<double>(r.recall.steps)
                         : 0.0;
    r.live = s.state->Stats().live;  // A failed step changed nothing.
    r.status = s.status;
    stats.shadows.push_back(std::move(r));
  }
  stats.reference_entries = reference_entries_;
  stats.reference_bytes =
      static_cast<int64_t>(reference_.capacity() * sizeof(float));
  stats.reference_capacity = options_.max_reference_entries;
  stats.reference_full = reference_full_;
  stats.steps_observed = steps_observed_;
  stats.score_every = options_.score_every;
  stats.bytes_held = bytes_held();
  return stats;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShadowSet>> ShadowSet::Create(
    const SessionConfig& primary, const ShadowOptions& options,
    Backend* backend) {
  if (absl::Status st = ValidateOptions(primary, options); !st.ok()) return st;
  std::unique_ptr<Backend> own;
  if (backend == nullptr) {
    absl::StatusOr<std::unique_ptr<Backend>> created =
        CreateBackend(BackendKind::kCpu);
    if (!created.ok()) return created.status();
    own = *std::move(created);
  }
  auto set = std::make_unique<ShadowSetImpl>(primary, options, std::move(own),
                                             backend);
  if (absl::Status st = set->Init(); !st.ok()) return st;
  return set;
}

}  // namespace entrokv
