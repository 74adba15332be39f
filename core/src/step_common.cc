#include "step_common.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/entropy.h"

namespace entrokv::internal {
namespace {

// The largest absolute bit pattern (sign cleared) of an element of `type`
// whose value is finite and at most kMaxElementMagnitude: for each type,
// |v| <= 1e8 and finite exactly when the pattern is at most this, since
// IEEE patterns of one sign are ordered as their values, with Inf and NaN
// above every finite one.
uint32_t LargestAcceptedBits(ElementType type) {
  const uint32_t f32 = std::bit_cast<uint32_t>(kMaxElementMagnitude);
  switch (type) {
    case ElementType::kF32:
      return f32;
    case ElementType::kBf16:
      return f32 >> 16;  // A bf16 is the top half of a float.
    case ElementType::kF16:
      return 0x7BFFu;  // 65504, the largest finite f16, is below 1e8.
  }
  return 0;
}

// Index of the first of `count` elements of `type` at `bytes` that is not
// finite or exceeds kMaxElementMagnitude, or -1. Compares bit patterns in
// place: no element is decoded. Whole blocks of kBlock elements are scanned
// with a constant trip count and an OR of the comparisons, which GCC
// vectorises at -O2 (its cheap cost model takes no loop whose length is
// known only at run time): in a harness, 12 times as fast as the scalar
// scan for 2,560 f16 elements, a default-shape step's keys and queries.
// Only a block with a bad element, and the tail, are searched one element
// at a time.
template <typename Bits>
int64_t FirstOutOfRangeBits(const std::byte* bytes, int64_t count,
                            uint32_t largest) {
  constexpr Bits kAbs = std::numeric_limits<Bits>::max() >> 1;  // No sign.
  constexpr int64_t kBlock = 256;
  const auto element = [bytes](int64_t i) {
    Bits bits;
    std::memcpy(&bits, bytes + i * sizeof(Bits), sizeof(Bits));
    return static_cast<Bits>(bits & kAbs);
  };
  // Without its sign bit an element is a non-negative signed integer, and so
  // is `largest`: a signed comparison, which SSE2 has (it has no unsigned
  // one for 16 and 32 bits).
  using Signed = std::make_signed_t<Bits>;
  const Signed limit = static_cast<Signed>(largest);
  int64_t begin = 0;
  for (; begin + kBlock <= count; begin += kBlock) {
    Bits bad = 0;
    for (int64_t i = 0; i < kBlock; ++i) {
      bad |= static_cast<Bits>(static_cast<Signed>(element(begin + i)) > limit);
    }
    if (bad != 0) break;
  }
  for (int64_t i = begin; i < count; ++i) {
    if (element(i) > largest) return i;
  }
  return -1;
}

int64_t FirstOutOfRange(ElementType type, const std::byte* bytes,
                        int64_t count) {
  const uint32_t largest = LargestAcceptedBits(type);
  return type == ElementType::kF32
             ? FirstOutOfRangeBits<uint32_t>(bytes, count, largest)
             : FirstOutOfRangeBits<uint16_t>(bytes, count, largest);
}

// Element `i` of `type` at `bytes`, as a float (exact).
float ElementAt(ElementType type, const std::byte* bytes, int64_t i) {
  float v;
  DecodeElements(type, bytes + i * ElementSize(type), 1, &v);
  return v;
}

std::string DescribeBad(float v) {
  return std::isfinite(v)
             ? absl::StrCat("value ", v, " exceeds 1e8 in magnitude")
             : std::string("non-finite value");
}

}  // namespace

absl::Status ValidateAndDecode(const SessionConfig& config,
                               const SessionLimits& limits,
                               std::optional<uint64_t> last_step,
                               const absl::flat_hash_set<uint64_t>& live_slots,
                               int64_t live, const StepInput& input,
                               DecodedStep* out, const StepRules& rules) {
  // No number follows 2^64-1: a session that started there could never step
  // again, and one that reached it has used its numbers up.
  constexpr uint64_t kLastStepNumber = std::numeric_limits<uint64_t>::max();
  if (!last_step.has_value() && input.step == kLastStepNumber) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step: ", kLastStepNumber,
        " (2^64-1) cannot be a session's first step: no step number could "
        "follow it; start below it"));
  }
  if (last_step.has_value() && *last_step == kLastStepNumber) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step: the session's last step was ", kLastStepNumber,
        " (2^64-1), so its step numbers are used up; close it and open a "
        "new session"));
  }
  if (last_step.has_value() && !rules.consecutive && input.step <= *last_step) {
    return absl::FailedPreconditionError(
        absl::StrCat("step: got ", input.step, ", expected more than ",
                     *last_step, " (a repeated or old step)"));
  }
  if (last_step.has_value() && rules.consecutive &&
      input.step != *last_step + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("step: got ", input.step, ", expected ", *last_step + 1,
                     input.step <= *last_step ? " (a repeated or old step)"
                                              : " (a step is missing)"));
  }
  const Shape& shape = config.shape;
  const int64_t esize = static_cast<int64_t>(ElementSize(shape.element_type));
  const int64_t n = static_cast<int64_t>(input.append.slot_ids.size());
  if (!input.append.pinned.empty() &&
      static_cast<int64_t>(input.append.pinned.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("append.pinned: ", input.append.pinned.size(),
                     " flags for ", n, " slot ids"));
  }
  const int64_t key_bytes = n * shape.key_elements() * esize;
  if (static_cast<int64_t>(input.append.keys.size()) != key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("append.keys: ", input.append.keys.size(),
                     " bytes, expected ", key_bytes, " (", n, " entries x ",
                     shape.layers, " layers x ", shape.kv_heads, " kv heads x ",
                     shape.vector_dim(), " x ", esize, " bytes)"));
  }
  const int64_t query_bytes = shape.query_elements() * esize;
  const bool has_queries =
      (rules.decision && RankingNeedsQueries(config.ranking)) ||
      !input.queries.empty();
  if (has_queries &&
      static_cast<int64_t>(input.queries.size()) != query_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queries: ", input.queries.size(), " bytes, expected ", query_bytes,
        " (", shape.layers, " layers x ", shape.query_heads(),
        shape.query_form == QueryForm::kGroupSum ? " kv heads (group sums)"
                                                 : " q heads",
        " x ", shape.vector_dim(), " x ", esize, " bytes)"));
  }
  if (input.entropy.has_value() && !input.logits.empty()) {
    return absl::InvalidArgumentError(
        "entropy: give either entropy or logits, not both");
  }
  if (!input.entropy.has_value() && input.logits.empty() && rules.decision &&
      PolicyNeedsEntropy(config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("entropy: required by policy ", PolicyName(config),
                     " (send entropy or logits)"));
  }
  double entropy = 0.0;
  bool has_entropy = false;
  if (input.entropy.has_value()) {
    if (absl::Status st = ValidateEntropy(*input.entropy); !st.ok()) return st;
    entropy = *input.entropy;
    if (entropy > kMaxEntropy) {
      return absl::InvalidArgumentError(
          absl::StrCat("entropy: ", entropy, " nats exceeds 1e6"));
    }
    has_entropy = true;
  } else if (!input.logits.empty()) {
    absl::StatusOr<double> h = EntropyFromLogits(input.logits);
    if (!h.ok()) return h.status();
    entropy = *h;
    has_entropy = true;
  }
  // Slot ids: unique in the batch and not live.
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t id = input.append.slot_ids[i];
    if (live_slots.contains(id)) {
      // With a demote tier the set holds the demoted ids too (section 12).
      return absl::InvalidArgumentError(absl::StrCat(
          "append.slot_ids: slot id ", id,
          config.tier.capacity > 0 ? " is already held (live or demoted)"
                                   : " is already live"));
    }
  }
  if (n > 1) {
    absl::flat_hash_set<uint64_t>& batch = out->batch_ids;
    batch.clear();
    for (uint64_t id : input.append.slot_ids) {
      if (!batch.insert(id).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "append.slot_ids: slot id ", id, " appears twice in the batch"));
      }
    }
  }
  if (limits.max_live_entries > 0 && live + n > limits.max_live_entries) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "append.slot_ids: ", live,
        config.tier.capacity > 0 ? " held (live and demoted) + " : " live + ",
        n, " new entries exceed ", "max_live_entries ",
        limits.max_live_entries));
  }
  // Reject non-finite and absurdly large values, in place; decode only what
  // the caller asked for.
  const ElementType type = shape.element_type;
  const int64_t key_elements = n * shape.key_elements();
  if (int64_t bad = FirstOutOfRange(type, input.append.keys.data(),
                                    key_elements);
      bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "append.keys: ",
        DescribeBad(ElementAt(type, input.append.keys.data(), bad)),
        " in entry ", bad / shape.key_elements(), " at element ",
        bad % shape.key_elements()));
  }
  const int64_t query_elements = has_queries ? shape.query_elements() : 0;
  if (int64_t bad =
          FirstOutOfRange(type, input.queries.data(), query_elements);
      bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queries: ", DescribeBad(ElementAt(type, input.queries.data(), bad)),
        " at element ", bad));
  }
  out->queries.resize(
      rules.decode_queries ? static_cast<size_t>(query_elements) : 0);
  DecodeElements(type, input.queries.data(), out->queries.size(),
                 out->queries.data());
  out->bytes_written =
      static_cast<int64_t>(out->queries.size() * sizeof(float));
  out->appended = n;
  out->entropy = entropy;
  out->has_entropy = has_entropy;
  out->has_queries = has_queries;
  return absl::OkStatus();
}

double SquaredNorm(ElementType type, const std::byte* bytes, int64_t count) {
  constexpr int64_t kChunk = 64;
  float v[kChunk];
  const size_t esize = ElementSize(type);
  double sq = 0.0;
  for (int64_t begin = 0; begin < count; begin += kChunk) {
    const int64_t n = std::min(kChunk, count - begin);
    DecodeElements(type, bytes + begin * esize, static_cast<size_t>(n), v);
    for (int64_t j = 0; j < n; ++j) {
      const double x = v[j];
      sq += x * x;
    }
  }
  return sq;
}

BudgetController::BudgetController(const SessionConfig& config)
    : control_(config.budget_control),
      budget_(config.budget),
      params_(config.entropy_budget) {
  min_budget_ = params_.min_budget > 0 ? params_.min_budget : 1;
  max_budget_ =
      params_.max_budget > 0
          ? params_.max_budget
          : static_cast<int64_t>(std::ceil(static_cast<double>(budget_) *
                                           (1.0 + params_.gamma)));
}

int64_t BudgetController::Next(double h) {
  if (control_ != BudgetControl::kEntropy) return budget_;
  if (!started_) {
    started_ = true;
    mean_ = h;
    var_ = 0.0;
  }
  const double z = (h - mean_) / (std::sqrt(var_) + params_.epsilon);
  const double raw =
      static_cast<double>(budget_) * (1.0 + params_.gamma * std::tanh(z));
  const int64_t b =
      std::clamp<int64_t>(std::llround(raw), min_budget_, max_budget_);
  const double r = params_.ema_rate;
  const double d = h - mean_;
  var_ = (1.0 - r) * (var_ + r * d * d);
  mean_ += r * d;
  return b;
}

int64_t H2oRecentFrom(double recent_fraction, int64_t budget,
                      absl::Span<const int64_t> live_index,
                      std::vector<int64_t>* scratch) {
  const int64_t keep = static_cast<int64_t>(
      std::ceil(recent_fraction * static_cast<double>(budget)));
  const int64_t n = static_cast<int64_t>(live_index.size());
  if (keep <= 0) return std::numeric_limits<int64_t>::max();
  if (keep >= n) return std::numeric_limits<int64_t>::min();
  scratch->assign(live_index.begin(), live_index.end());
  // The keep-th largest index: every index >= it is among the newest `keep`.
  auto kth = scratch->begin() + (keep - 1);
  std::nth_element(scratch->begin(), kth, scratch->end(),
                   std::greater<int64_t>());
  return *kth;
}

// Up to this many evictions without a threshold, the token ranking keeps a
// heap of the weakest instead of a candidate per token and a partition of
// them all: in the sketched 8B step at 32k live (docs/performance.md) the
// selection fell from 16% of the step's time to 3%.
constexpr int64_t kSmallNeed = 64;

namespace {

// Section 8's order of token candidates: by keep score, then append index.
// A strict total order on non-NaN scores (append indices are distinct).
bool Weaker(const SelectionScratch::Candidate& a,
            const SelectionScratch::Candidate& b) {
  return a.score < b.score || (a.score == b.score && a.order < b.order);
}

// Whether any of the kSkipBlock tokens from position p is unprotected with
// a keep score that passes `may_enter`: a pass over the tokens skips a block
// on one branch instead of taking one per token. (GCC 12 -O2 compiles it to
// a branch-free scalar loop, not a vector one.)
constexpr int32_t kSkipBlock = 8;
template <class Pred>
bool AnyUnprotected(const SelectionInput& in, int32_t p, Pred may_enter) {
  // Raw pointers: Span's checked operator[] keeps the loop scalar.
  const double* keep = in.keep.data() + p;
  const uint8_t* protect = in.protect.data() + p;
  bool any = false;
  for (int32_t i = 0; i < kSkipBlock; ++i) {
    any |= may_enter(keep[i]) & (protect[i] == 0);
  }
  return any;
}

// The `in.need` weakest unprotected tokens (all of them when fewer), in one
// pass, as a max-heap under Weaker (its front the strongest of them): the
// same set as a partition of every candidate, without a candidate per token.
void WeakestTokens(const SelectionInput& in,
                   std::vector<SelectionScratch::Candidate>* heap) {
  heap->clear();
  const int32_t n = static_cast<int32_t>(in.keep.size());
  auto consider = [&](int32_t p) {
    if (in.protect[p]) return;
    const SelectionScratch::Candidate c{in.keep[p], in.index[p], p};
    if (static_cast<int64_t>(heap->size()) < in.need) {
      heap->push_back(c);
      std::push_heap(heap->begin(), heap->end(), Weaker);
    } else if (Weaker(c, heap->front())) {
      std::pop_heap(heap->begin(), heap->end(), Weaker);
      heap->back() = c;
      std::push_heap(heap->begin(), heap->end(), Weaker);
    }
  };
  int32_t p = 0;
  for (; p < n && static_cast<int64_t>(heap->size()) < in.need; ++p) {
    consider(p);
  }
  // Once the heap is full, a token can enter only if its score is at most
  // the strongest's (NaN never does): blocks with none such are skipped.
  for (; p + kSkipBlock <= n; p += kSkipBlock) {
    const double bound = heap->front().score;
    if (!AnyUnprotected(in, p, [bound](double x) { return x <= bound; })) {
      continue;
    }
    for (int32_t i = 0; i < kSkipBlock; ++i) consider(p + i);
  }
  for (; p < n; ++p) consider(p);
}

}  // namespace

void SelectEvictions(const SelectionInput& in, SelectionScratch* scratch,
                     std::vector<int32_t>* evict) {
  if (in.need <= 0 && !in.threshold) return;
  auto& cands = scratch->candidates;
  cands.clear();
  const int32_t n = static_cast<int32_t>(in.keep.size());
  // How many candidates go: `want`, or under a threshold at least those
  // scoring below tau, which are the smallest in the order.
  auto count = [&](int64_t want) {
    if (in.threshold) {
      int64_t below = 0;
      for (const SelectionScratch::Candidate& c : cands) {
        below += c.score < *in.threshold ? 1 : 0;
      }
      want = std::max(want, below);
    }
    return std::min<int64_t>(std::max<int64_t>(want, 0), cands.size());
  };
  if (in.block_size == 1 && !in.threshold && in.need <= kSmallNeed) {
    WeakestTokens(in, &cands);
    for (const SelectionScratch::Candidate& c : cands) evict->push_back(c.pos);
    return;
  }
  if (in.block_size == 1) {
    for (int32_t p = 0; p < n; ++p) {
      if (!in.protect[p]) cands.push_back({in.keep[p], in.index[p], p});
    }
    const int64_t k = count(in.need);
    if (k < static_cast<int64_t>(cands.size())) {
      std::nth_element(cands.begin(), cands.begin() + k, cands.end(), Weaker);
    }
    for (int64_t i = 0; i < k; ++i) evict->push_back(cands[i].pos);
    return;
  }
  // Blocks: aggregate tokens per block id (append index / N) over the blocks
  // that hold live tokens; O(live) expected, whatever was appended before.
  const int64_t bs = in.block_size;
  const int64_t full_blocks = in.next_index / bs;
  auto& blocks = scratch->blocks;
  auto& block_of = scratch->block_of;
  blocks.clear();
  block_of.clear();
  for (int32_t p = 0; p < n; ++p) {
    const int64_t b = in.index[p] / bs;
    if (b >= full_blocks) continue;  // The partial last block.
    auto [it, inserted] =
        block_of.try_emplace(b, static_cast<int32_t>(blocks.size()));
    if (inserted) blocks.push_back({.id = b});
    SelectionScratch::Block& blk = blocks[it->second];
    blk.max = blk.tokens == 0 ? in.keep[p] : std::max(blk.max, in.keep[p]);
    blk.sum += in.keep[p];
    ++blk.tokens;
    blk.protect = blk.protect || in.protect[p];
  }
  for (int32_t i = 0; i < static_cast<int32_t>(blocks.size()); ++i) {
    const SelectionScratch::Block& blk = blocks[i];
    if (blk.tokens != bs || blk.protect) continue;
    const double score = in.block_reduce == BlockReduce::kMax
                             ? blk.max
                             : blk.sum / static_cast<double>(bs);
    cands.push_back({score, blk.id, i});
  }
  const int64_t k = count(in.need > 0 ? (in.need + bs - 1) / bs : 0);
  if (k < static_cast<int64_t>(cands.size())) {
    std::nth_element(cands.begin(), cands.begin() + k, cands.end(), Weaker);
  }
  // Mark chosen blocks, then collect their tokens' positions.
  for (int64_t i = 0; i < k; ++i) blocks[cands[i].pos].tokens = -1;
  for (int32_t p = 0; p < n; ++p) {
    const int64_t b = in.index[p] / bs;
    if (b >= full_blocks) continue;
    if (blocks[block_of.find(b)->second].tokens == -1) evict->push_back(p);
  }
}

bool SelectEvictionsOfIncreasing(const SelectionInput& in,
                                 double (*keep_of)(double),
                                 SelectionScratch* scratch,
                                 std::vector<int32_t>* evict) {
  using Candidate = SelectionScratch::Candidate;
  if (in.block_size != 1 || in.threshold || in.need <= 0 ||
      in.need > kSmallNeed) {
    return false;
  }
  // S: the `need` weakest by (x, index).
  std::vector<Candidate>& heap = scratch->candidates;
  WeakestTokens(in, &heap);
  for (const Candidate& c : heap) {
    if (std::isnan(c.score)) return false;
  }
  if (static_cast<int64_t>(heap.size()) == in.need) {
    // M: the greatest (keep_of(x), index) in S.
    double m_keep = -std::numeric_limits<double>::infinity();
    int64_t m_order = std::numeric_limits<int64_t>::min();
    for (const Candidate& c : heap) {
      const double k = keep_of(c.score);
      if (k > m_keep || (k == m_keep && c.order > m_order)) {
        m_keep = k;
        m_order = c.order;
      }
    }
    // Every other candidate must follow M in section 8's order. One whose x
    // is at least b does. keep_of is within a relative e = 2^-46 of an
    // increasing F where F is at least 2^-900 (glibc's exp, the worst part of
    // σ, is within a few units of 2^-52); so for y >= b,
    //   keep_of(y) >= F(y)(1 - e) >= F(b)(1 - e) >= keep_of(b)(1 - e)/(1 + e)
    //              >= m_keep (1 + 2^-43)(1 - 2e) > m_keep.
    if (!(m_keep >= 0x1p-899)) return false;  // So that F(b) >= 2^-900.
    const double target = m_keep + m_keep * 0x1p-43;
    const Candidate& strongest = heap.front();
    double step = std::max(std::abs(strongest.score), 1.0) * 0x1p-44;
    double b = strongest.score + step;
    for (int i = 0; !(keep_of(b) >= target); ++i) {
      step *= 2;
      b = strongest.score + step;
      if (i == 64 || !std::isfinite(b)) return false;
    }
    // The others below b: compared directly, while they are few.
    int64_t near = 0;
    // Whether position p is in S, protected, at least b, or follows M.
    auto follows = [&](int32_t p) {
      if (in.protect[p] || in.keep[p] >= b) return true;
      if (std::isnan(in.keep[p])) return false;
      const Candidate c{in.keep[p], in.index[p], p};
      if (!Weaker(strongest, c)) return true;  // In S.
      if (++near > 4 * kSmallNeed) return false;
      const double k = keep_of(c.score);
      return k > m_keep || (k == m_keep && c.order > m_order);
    };
    const int32_t n = static_cast<int32_t>(in.keep.size());
    int32_t p = 0;
    for (; p + kSkipBlock <= n; p += kSkipBlock) {
      if (!AnyUnprotected(in, p, [b](double x) { return !(x >= b); })) {
        continue;  // All protected or at least b.
      }
      for (int32_t i = 0; i < kSkipBlock; ++i) {
        if (!follows(p + i)) return false;
      }
    }
    for (; p < n; ++p) {
      if (!follows(p)) return false;
    }
  }
  for (const Candidate& c : heap) evict->push_back(c.pos);
  return true;
}

void SelectTierMoves(const TierSelectionInput& in, TierScratch* scratch,
                     TierMoves* moves) {
  using Candidate = SelectionScratch::Candidate;
  moves->demote.clear();
  moves->promote.clear();
  moves->evict.clear();
  // Section 8's order (Weaker), and its reverse.
  auto better = [](const Candidate& a, const Candidate& b) {
    return Weaker(b, a);
  };
  const int32_t n = static_cast<int32_t>(in.keep.size());
  std::vector<Candidate>& live = scratch->live;  // Unprotected live.
  std::vector<Candidate>& tier = scratch->tier;  // Demoted before the step.
  live.clear();
  tier.clear();
  for (int32_t p = 0; p < n; ++p) {
    if (in.demoted[p]) {
      tier.push_back({in.keep[p], in.index[p], p});
    } else if (!in.protect[p]) {
      live.push_back({in.keep[p], in.index[p], p});
    }
  }

  // Step 4: demote the weakest `need` unprotected live entries.
  const int64_t down = std::clamp<int64_t>(in.live - in.budget, 0,
                                           static_cast<int64_t>(live.size()));
  if (down > 0 && down < static_cast<int64_t>(live.size())) {
    std::nth_element(live.begin(), live.begin() + down, live.end(), Weaker);
  }
  for (int64_t i = 0; i < down; ++i) moves->demote.push_back(live[i].pos);
  int64_t live_count = in.live - down;

  // Step 5: the best of the tier fill room, then swap with the weakest
  // remaining live entries while they beat them by the margin.
  const int64_t take = std::min<int64_t>(in.params.max_promotions,
                                         static_cast<int64_t>(tier.size()));
  std::partial_sort(tier.begin(), tier.begin() + take, tier.end(), better);
  const auto w_begin = live.begin() + down;
  const int64_t w_size = static_cast<int64_t>(live.end() - w_begin);
  const int64_t w_take = std::min(take, w_size);
  std::partial_sort(w_begin, w_begin + w_take, live.end(), Weaker);
  int64_t promoted = 0;
  int64_t swapped = 0;
  while (promoted < take) {
    const Candidate& t = tier[promoted];
    if (live_count < in.budget) {
      ++live_count;
    } else if (swapped < w_take &&
               t.score > w_begin[swapped].score + in.params.promote_margin) {
      moves->demote.push_back(w_begin[swapped].pos);
      ++swapped;
    } else {
      break;
    }
    moves->promote.push_back(t.pos);
    ++promoted;
  }

  // Step 6: the tier's weakest entries past its capacity go for good.
  std::vector<Candidate>& held = scratch->held;
  held.assign(tier.begin() + promoted, tier.end());
  for (int32_t p : moves->demote) held.push_back({in.keep[p], in.index[p], p});
  const int64_t excess = static_cast<int64_t>(held.size()) - in.params.capacity;
  if (excess <= 0) return;
  if (excess < static_cast<int64_t>(held.size())) {
    std::nth_element(held.begin(), held.begin() + excess, held.end(), Weaker);
  }
  std::vector<uint8_t>& dropped = scratch->dropped;
  dropped.assign(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < excess; ++i) {
    moves->evict.push_back(held[i].pos);
    dropped[held[i].pos] = 1;
  }
  // Net moves: an entry demoted and dropped by this step is only evicted.
  std::erase_if(moves->demote, [&](int32_t p) { return dropped[p] != 0; });
}

}  // namespace entrokv::internal
