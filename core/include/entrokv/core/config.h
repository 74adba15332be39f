// Session configuration: what the engine sends, how many entries may live, and
// the policy that picks evictions.
//
// A policy is two orthogonal parts (docs/design.md "Policies"): a Ranking (which
// entries matter least) and a BudgetControl (how many may live at this step).
// Protection (sinks, recent, pinned) applies to every ranking. Every field has
// a usable default; ValidateSessionConfig() names the first bad field. Plain
// data, no synchronisation.

#ifndef ENTROKV_CORE_CONFIG_H_
#define ENTROKV_CORE_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/rule.h"

namespace entrokv {

// How a step's queries travel (docs/step-semantics.md section 3).
enum class QueryForm : uint8_t {
  kPerHead,   // One query per q head: [layer][q_head][dim].
  kGroupSum,  // Per kv head, the sum of its GQA group's queries:
              // [layer][kv_head][dim]. Enough for the mean logit s_i; not
              // for the per-head softmax (tova, h2o, birth, rkv) or
              // query statistics (expected).
};

// The shape of the vectors an engine sends per step. Keys are laid out
// [layer][kv_head][dim] per entry; queries [layer][q_head][dim] (kPerHead) or
// [layer][kv_head][dim] (kGroupSum), where dim = vector_dim(): head_dim, or
// sketch_dim when keys and queries are sketched (project:r, see sketch.h).
// Scores are always scaled by 1/sqrt(head_dim), the model's head size.
struct Shape {
  int32_t layers =
      1;  // Layers sent (scored); see SessionConfig::scored_layers.
  int32_t kv_heads = 1;
  int32_t q_heads = 1;  // A multiple of kv_heads (GQA / MQA).
  int32_t head_dim = 64;
  ElementType element_type = ElementType::kF16;
  // 0: exact (vectors of head_dim). r in [1, head_dim]: keys and queries are
  // projected to r columns by the engine's side (project:r).
  int32_t sketch_dim = 0;
  QueryForm query_form = QueryForm::kPerHead;

  int32_t group_size() const { return q_heads / kv_heads; }
  // Elements per key or query vector on the wire and in memory.
  int32_t vector_dim() const { return sketch_dim > 0 ? sketch_dim : head_dim; }
  // Query vectors per layer: q_heads, or kv_heads for kGroupSum.
  int32_t query_heads() const {
    return query_form == QueryForm::kGroupSum ? kv_heads : q_heads;
  }
  // Elements (not bytes) of one entry's keys and of one step's queries.
  int64_t key_elements() const {
    return int64_t{layers} * kv_heads * vector_dim();
  }
  int64_t query_elements() const {
    return int64_t{layers} * query_heads() * vector_dim();
  }
};

// Ranking (which entries matter least) is defined in rule.h, beside the
// keep scores that use it.
inline constexpr Ranking kAllRankings[] = {
    Ranking::kWindow,   Ranking::kStreaming, Ranking::kH2o,
    Ranking::kTova,     Ranking::kKeyNorm,   Ranking::kRandom,
    Ranking::kAffinity, Ranking::kKeyDiff,   Ranking::kExpected,
    Ranking::kBirth,    Ranking::kRkv};

// How many entries may live at a step (docs/step-semantics.md sections 6 and
// 8): a fixed budget, one that follows the entropy, or a fixed ceiling under
// which entries are also evicted once their keep score falls below a
// threshold (after DMS/KVzap), so that memory follows the input.
enum class BudgetControl : uint8_t { kFixed, kEntropy, kThreshold };
inline constexpr BudgetControl kAllBudgetControls[] = {
    BudgetControl::kFixed, BudgetControl::kEntropy, BudgetControl::kThreshold};

// The affinity update rule (docs/design.md "Affinity").
enum class AffinityUpdate : uint8_t {
  kSeed,      // Ω ← σ(Ω + β·H·s): the rule as first proposed.
  kLogitEma,  // a ← λ·a + β·H·s, Ω = σ(a): accumulates evidence.
};

// How a block's score aggregates its tokens' scores.
enum class BlockReduce : uint8_t { kMean, kMax };

enum class Placement : uint8_t { kCpu, kGpu, kAuto };

struct AffinityParams {
  AffinityUpdate update = AffinityUpdate::kLogitEma;
  double beta = 1.0;
  double lambda = 0.9;  // kLogitEma only; in [0, 1].
};

// B_t = clamp(round(B·(1 + γ·tanh((H_t − μ) / (σ + ε)))), min_budget,
// max_budget), with μ and σ exponential moving mean and deviation of the
// entropy (rate `ema_rate`), both taken before H_t is folded in.
struct EntropyBudgetParams {
  double gamma = 0.5;      // In [0, 1).
  double ema_rate = 0.05;  // In (0, 1].
  double epsilon = 1e-3;   // > 0.
  int64_t min_budget = 0;  // 0: 1.
  int64_t max_budget = 0;  // 0: ceil(B·(1 + γ)).
};

struct H2oParams {
  double recent_fraction = 0.5;  // Share of the step's budget kept as recent.
};

// The `expected` ranking's Gaussian model of future queries: per (layer, q
// head), an exponential moving mean and diagonal variance of the decision
// steps' queries (docs/step-semantics.md section 5).
struct ExpectedParams {
  double ema_rate = 0.05;  // In (0, 1]; 1: the step's own query only.
};

// The `birth` ranking (after InfoKV): keep score a_i · exp(η · H_birth,i)
// (docs/step-semantics.md section 7).
struct BirthParams {
  double weight = 1.0;  // η, in [0, 100].
};

// The `rkv` ranking (R-KV): keep score λ·a_i − (1 − λ)·R_i, R_i the
// redundancy of entry i's key with `sample` reference keys
// (docs/step-semantics.md sections 3 and 7).
struct RkvParams {
  double lambda = 0.1;   // λ, in [0, 1]: R-KV's default.
  int64_t sample = 64;   // Reference keys, in [1, 65536]: bounds the cost.
};

// The `threshold` budget control: every unprotected entry whose keep score
// is below `tau` is evicted, and the budget is a ceiling (docs/step-semantics.md
// section 8). The protected recent window is `Protection::recent`. The scale of
// tau is the ranking's keep score (tova: a share of the attention).
struct ThresholdParams {
  double tau = 0.01;  // Finite.
};

// A demote tier (docs/step-semantics.md section 12): instead of evicting,
// the session moves entries to the engine's host tier of `capacity` entries,
// promotes them back when they score above the weakest live entry by
// `promote_margin`, and evicts for good only when the tier overflows.
struct TierParams {
  int64_t capacity = 0;         // D, in [0, 2^40]; 0: no tier.
  double promote_margin = 0.0;  // m, finite, >= 0, on the keep-score scale.
  int64_t max_promotions = 8;   // P per decision step, in [0, 2^40].
};

struct Protection {
  int64_t sinks = 0;   // The first `sinks` entries ever appended are kept.
  int64_t recent = 0;  // The last `recent` entries appended are kept.
};

struct SessionConfig {
  Shape shape;
  int64_t budget = 256;  // Target live entries, counted in tokens.
  Ranking ranking = Ranking::kAffinity;
  BudgetControl budget_control = BudgetControl::kEntropy;
  AffinityParams affinity;
  EntropyBudgetParams entropy_budget;
  H2oParams h2o;
  ExpectedParams expected;
  BirthParams birth;
  RkvParams rkv;
  ThresholdParams threshold;
  TierParams tier;
  int64_t streaming_sinks = 4;  // kStreaming: entries always ranked first.
  uint64_t seed = 0;            // kRandom.
  Protection protection;
  int32_t block_size = 1;  // 1: token granularity; N > 1: blocks of N tokens.
  BlockReduce block_reduce = BlockReduce::kMean;
  // Block granularity only: one state per block, scored from the block's mean
  // key (docs/step-semantics.md section 10), instead of per-token state.
  bool block_summary = false;
  Placement placement = Placement::kAuto;

  // Decision cadence (docs/step-semantics.md section 11): appends are recorded
  // every step; scoring, ranking updates and evictions run on every
  // decide_every-th step, and at once on a step whose appends would take the
  // live count past hard_ceiling (0: no ceiling; else >= budget).
  int32_t decide_every = 1;
  int64_t hard_ceiling = 0;

  // Sketches (sketch.h). The model layers the engine sends, in order: empty
  // means 0..shape.layers-1; else shape.layers strictly increasing indices.
  // They name the default projection of each sent layer.
  std::vector<int32_t> scored_layers;
  // Seed of the default project:r matrices (ignored when exact).
  uint64_t projection_seed = 0;
};

// OK, or InvalidArgument naming the first bad field (e.g. "shape.q_heads: 6
// is not a multiple of shape.kv_heads 4").
absl::Status ValidateSessionConfig(const SessionConfig& config);

// True when the policy reads the step's entropy (affinity or birth ranking,
// or entropy budget); such steps must carry an entropy or logits.
bool PolicyNeedsEntropy(const SessionConfig& config);

// True when the ranking needs each q head's query (tova, h2o, birth, rkv: the
// per-head softmax; expected: the per-head query statistics), which a
// kGroupSum query cannot give.
bool RankingNeedsPerHeadQueries(Ranking ranking);

// False for the one ranking that reads no query (keydiff): its decision steps
// may omit queries (docs/step-semantics.md section 1).
bool RankingNeedsQueries(Ranking ranking);

// False for the rankings whose keep score is an append index (window,
// streaming); only the others take the threshold budget control.
bool RankingHasScores(Ranking ranking);

// Every pairing of a ranking and a budget control that a session accepts
// (threshold only with a ranking that has scores), in kAllRankings order,
// then kAllBudgetControls order.
std::vector<std::pair<Ranking, BudgetControl>> AllPolicies();

// The model layers a session scores by default for a model of `model_layers`
// layers: all of them up to 4; otherwise 4 spread evenly, layer
// floor((2i + 1) · model_layers / 8) for i = 0..3 (for 32 layers: 4, 12, 20,
// 28). The engine then sends only those layers.
std::vector<int32_t> DefaultScoredLayers(int32_t model_layers);

// "exact" or "project:R" (R >= 1): sets shape.sketch_dim (0 for exact).
// InvalidArgument naming `sketch` on anything else.
absl::Status ApplySketchName(std::string_view name, Shape* shape);
// "exact" or "project:R".
std::string SketchName(const Shape& shape);
std::string_view QueryFormName(QueryForm form);  // "per_head", "group_sum"
bool ParseQueryForm(std::string_view name, QueryForm* form);

// Names used by flags, the wire and reports.
std::string_view RankingName(Ranking ranking);
bool ParseRanking(std::string_view name, Ranking* ranking);
std::string_view BudgetControlName(BudgetControl control);
bool ParseBudgetControl(std::string_view name, BudgetControl* control);
std::string_view AffinityUpdateName(AffinityUpdate update);
bool ParseAffinityUpdate(std::string_view name, AffinityUpdate* update);
std::string_view PlacementName(Placement placement);
bool ParsePlacement(std::string_view name, Placement* placement);

// Sets ranking and budget control from a policy name: a ranking name alone
// ("h2o": fixed budget), "RANKING+CONTROL" ("h2o+entropy"), or the project's
// policy "entropy" (= "affinity+entropy"). InvalidArgument on anything else.
absl::Status ApplyPolicyName(std::string_view name, SessionConfig* config);
// "affinity+entropy" etc.
std::string PolicyName(const SessionConfig& config);

}  // namespace entrokv

#endif  // ENTROKV_CORE_CONFIG_H_
