// Host-side pieces of a step that every backend shares, so that backends
// differ only in where keys live and how scores are computed: input validation
// and decoding, the entropy budget controller, the keep-score rules that need
// no key data, and eviction selection (docs/step-semantics.md, sections 1, 4,
// 6, 7 and 8). Not thread-safe; each session owns its own instances.

#ifndef ENTROKV_CORE_SRC_STEP_COMMON_H_
#define ENTROKV_CORE_SRC_STEP_COMMON_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"

namespace entrokv::internal {

// Per-entry state bytes counted in bytes_held besides the keys.
inline constexpr int64_t kEntryStateBytes = 40;

inline int64_t BytesPerEntry(const Shape& shape) {
  return shape.key_elements() *
             static_cast<int64_t>(ElementSize(shape.element_type)) +
         kEntryStateBytes;
}

// Largest magnitude accepted for a key or query element, and for an entropy.
// Real activations are orders of magnitude smaller; the bounds keep every dot
// product, summed query and affinity update finite (no NaN can reach a keep
// score, whose order must be a strict weak order).
inline constexpr float kMaxElementMagnitude = 1e8f;
inline constexpr double kMaxEntropy = 1e6;

// The per-step bookkeeping every backend reports in SessionStats.
struct StepCounters {
  explicit StepCounters(int64_t budget) : last_budget(budget) {}

  // An accepted step that held `live_before_evictions` entries after its
  // appends and evicted `evicted_now` of them under budget `budget`.
  void Record(uint64_t step, int64_t live_before_evictions, int64_t evicted_now,
              int64_t budget) {
    peak_live = std::max(peak_live, live_before_evictions);
    evicted += evicted_now;
    last_step = step;
    ++steps;
    last_budget = budget;
  }

  SessionStats ToStats(int64_t live, int64_t appended, int64_t bytes_per_entry,
                       Placement placement) const {
    SessionStats s;
    s.live = live;
    s.peak_live = peak_live;
    s.steps = steps;
    s.last_step = last_step;
    s.appended = appended;
    s.evicted = evicted;
    s.budget = last_budget;
    s.bytes_held = live * bytes_per_entry;
    s.bytes_copied = bytes_copied;
    s.placement = placement;
    return s;
  }

  std::optional<uint64_t> last_step;
  int64_t steps = 0;
  int64_t peak_live = 0;
  int64_t evicted = 0;
  int64_t last_budget;
  int64_t bytes_copied = 0;  // SessionStats::bytes_copied.
};

// A validated step, decoded to floats.
struct DecodedStep {
  int64_t appended = 0;  // New entries.
  // query_elements, decoded when StepRules::decode_queries and the step has
  // queries; else empty.
  std::vector<float> queries;
  int64_t bytes_written = 0;  // Bytes decoded into queries.
  double entropy = 0.0;        // H used (0 when none was given).
  bool has_entropy = false;
  bool has_queries = false;  // False only on a step without a decision.
  absl::flat_hash_set<uint64_t> batch_ids;  // Scratch: duplicate check.
};

// Which parts of section 1 a caller enforces.
struct StepRules {
  // The step number must be last_step + 1; else only greater than last_step
  // (a backend under a cadence sees only decision steps, section 11).
  bool consecutive = true;
  // Queries (unless the ranking reads none, RankingNeedsQueries) and, for
  // policies that read it, an entropy must be sent; else they may be absent
  // (a step that makes no decision), and are checked and decoded only when
  // present.
  bool decision = true;
  // Decode the queries into DecodedStep::queries (a backend scores with
  // them); else they are only checked, in place.
  bool decode_queries = true;
};

inline bool RankingNeedsMeanLogit(Ranking r) { return r == Ranking::kAffinity; }
inline bool RankingNeedsAttention(Ranking r) {
  return r == Ranking::kH2o || r == Ranking::kTova || r == Ranking::kBirth ||
         r == Ranking::kRkv;
}

// What a backend's step computes: s_i (the mean logit) and a_i (the softmax
// attention); a trace shows both (a kGroupSum query gives no per-head
// softmax, so a trace's attention stays 0 under it).
struct ScoreNeeds {
  bool mean = false;
  bool attention = false;
  bool any() const { return mean || attention; }
};
inline ScoreNeeds StepScoreNeeds(const SessionConfig& config, bool traced) {
  return {.mean = RankingNeedsMeanLogit(config.ranking) || traced,
          .attention = RankingNeedsAttention(config.ranking) ||
                       (traced && config.shape.query_form == QueryForm::kPerHead)};
}

// The rules a backend applies to the steps its session receives: a session
// with decide_every > 1 is driven by its cadence layer, which has already
// checked the numbering and passes on decision steps only.
// Queries are decoded only when the step scores with them (`needs`).
inline StepRules BackendStepRules(const SessionConfig& config,
                                  const ScoreNeeds& needs) {
  return {.consecutive = config.decide_every <= 1,
          .decision = true,
          .decode_queries =
              needs.any() || config.ranking == Ranking::kExpected};
}

// Checks `input` against the session (docs/step-semantics.md section 1, all
// but the byte limit, which belongs to the backend) and decodes it into `out`.
// Changes nothing else; `out` is scratch reused across steps.
absl::Status ValidateAndDecode(const SessionConfig& config,
                               const SessionLimits& limits,
                               std::optional<uint64_t> last_step,
                               const absl::flat_hash_set<uint64_t>& live_slots,
                               int64_t live, const StepInput& input,
                               DecodedStep* out, const StepRules& rules);

// Σ v² over the `count` elements of `type` at `bytes`, each exact as a
// float, summed in double in order. Decodes a few at a time on the stack.
double SquaredNorm(ElementType type, const std::byte* bytes, int64_t count);

// The threshold budget control's tau, when the session has one (section 8).
inline std::optional<double> EvictionThreshold(const SessionConfig& config) {
  if (config.budget_control != BudgetControl::kThreshold) return std::nullopt;
  return config.threshold.tau;
}

// The budget controller (section 6).
class BudgetController {
 public:
  explicit BudgetController(const SessionConfig& config);

  // The budget of a step with entropy `h` (ignored by kFixed); folds `h` into
  // the running statistics.
  int64_t Next(double h);

 private:
  BudgetControl control_;
  int64_t budget_;
  EntropyBudgetParams params_;
  int64_t min_budget_;
  int64_t max_budget_;
  bool started_ = false;
  double mean_ = 0.0;
  double var_ = 0.0;
};

// The live entries as the selection sees them: per position, the keep score,
// append index and protection flag.
struct SelectionInput {
  absl::Span<const double> keep;
  absl::Span<const int64_t> index;
  absl::Span<const uint8_t> protect;
  int64_t next_index = 0;  // Entries ever appended.
  int64_t need = 0;        // live − B_t.
  // The threshold budget control's tau: candidates (tokens or blocks) that
  // score below it are evicted too, however many that is.
  std::optional<double> threshold;
  int32_t block_size = 1;
  BlockReduce block_reduce = BlockReduce::kMean;
};

// Reusable buffers for SelectEvictions.
struct SelectionScratch {
  struct Candidate {
    double score;
    int64_t order;  // Append index (tokens) or block id (blocks).
    int32_t pos;    // Position (tokens) or index into `blocks` (blocks).
  };
  std::vector<Candidate> candidates;
  struct Block {
    int64_t id = 0;
    double sum = 0.0;
    double max = 0.0;
    int32_t tokens = 0;
    bool protect = false;
  };
  std::vector<Block> blocks;
  absl::flat_hash_map<int64_t, int32_t> block_of;  // Block id → index.
};

// Appends to `evict` the positions to evict (section 8), in no given order.
void SelectEvictions(const SelectionInput& in, SelectionScratch* scratch,
                     std::vector<int32_t>* evict);

// SelectEvictions' answer when each keep score is keep_of(x), with `in.keep`
// holding x, for keep_of increasing up to its rounding: within a relative
// 2^-46 of an increasing function where its value is at least 2^-900 (Ω =
// σ(a) as rule::Omega computes it, for one). It ranks by x and calls keep_of
// only for the selected entries, a few values to bracket them, and the
// entries whose x is too close to theirs to be ordered by x alone: the
// logit_ema ranking without an exp per live entry. Returns false, having
// appended nothing, when it cannot show the set is SelectEvictions': a
// selection of blocks, with a threshold or of more than 64; an x NaN; many
// entries near the boundary; keep_of flat there (σ near 1). The caller then
// computes every keep score and calls SelectEvictions.
bool SelectEvictionsOfIncreasing(const SelectionInput& in,
                                 double (*keep_of)(double),
                                 SelectionScratch* scratch,
                                 std::vector<int32_t>* evict);

// The held entries as a tier's selection sees them (section 12): per
// position, the keep score, append index, protection and tier flag, at
// token granularity.
struct TierSelectionInput {
  absl::Span<const double> keep;
  absl::Span<const int64_t> index;
  absl::Span<const uint8_t> protect;
  absl::Span<const uint8_t> demoted;  // 1: in the tier at the step's start.
  int64_t live = 0;                   // Live entries after the append.
  int64_t budget = 0;                 // B_t.
  TierParams params;
};

// A step's moves as positions, each list in no given order: the net moves
// of section 12 step 7 (an entry demoted and dropped by the step is only in
// `evict`).
struct TierMoves {
  std::vector<int32_t> demote;
  std::vector<int32_t> promote;
  std::vector<int32_t> evict;
};

// Reusable buffers for SelectTierMoves.
struct TierScratch {
  std::vector<SelectionScratch::Candidate> live;
  std::vector<SelectionScratch::Candidate> tier;
  std::vector<SelectionScratch::Candidate> held;  // The tier after the moves.
  std::vector<uint8_t> dropped;  // Per position: evicted by the overflow.
};

// Steps 4-6 of section 12: demotion, promotion and overflow. `moves` is
// cleared first. O(held) plus sorts of at most P + 1 entries per side.
void SelectTierMoves(const TierSelectionInput& in, TierScratch* scratch,
                     TierMoves* moves);

// Protection and keep scores: entrokv/core/rule.h.

// The append index from which the h2o ranking's recent share starts: the
// ceil(recent_fraction · B_t) newest live entries, given the live append
// indices (in any order). `scratch` is reused.
int64_t H2oRecentFrom(double recent_fraction, int64_t budget,
                      absl::Span<const int64_t> live_index,
                      std::vector<int64_t>* scratch);

}  // namespace entrokv::internal

#endif  // ENTROKV_CORE_SRC_STEP_COMMON_H_
