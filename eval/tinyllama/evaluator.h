// Teacher-forced evaluation of the model with an eviction decider in the loop,
// and the TinyStories data it runs on.
//
// EvaluateSequence() feeds tokens[0..n-2] one at a time and scores the true
// next token. At position t the decode loop:
//   1. runs the forward pass of token t: its key and value are appended to the
//      cache, and its query attends over every live entry, its own included;
//   2. adds −log p_t(tokens[t+1]) to the NLL;
//   3. sends step t (its slot, the keys of all layers, the queries of all
//      layers, H(p_t)) to the decider;
//   4. frees the slots the decider answered `lag` steps earlier (lag 0: step
//      t's own answer; lag 1, the pipelined mode: step t−1's answer, as when
//      the round trip overlaps the next token's compute); with a demote tier,
//      then moves that answer's demoted slots to the cache's host tier and
//      its promoted slots back (kv_cache.h).
// So step t's evictions apply from token t+1+lag on; token t itself always
// attends over the cache as it was when its forward pass ran. The decider
// needs the queries and the entropy, which exist only once the forward pass is
// done, so no causal engine can apply them sooner.
//
// Memory is counted as the engine holds it: `live` at position t is the number
// of entries token t attends over (its own key included), the device's
// entries; demoted entries are not attended and are not counted.
//
// Thread-safety: EvaluateSequence() is reentrant; distinct calls may share the
// model.

#ifndef ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_EVALUATOR_H_
#define ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_EVALUATOR_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "entrokv/core/config.h"
#include "tinyllama/decider.h"
#include "tinyllama/model.h"
#include "tinyllama/tokenizer.h"

namespace entrokv::tinyllama {

struct SequenceResult {
  double nll_sum = 0.0;     // Σ −log p(true next token), nats.
  int64_t predicted = 0;    // Tokens scored: tokens.size() − 1.
  int64_t live_sum = 0;     // Σ over positions of entries attended.
  int64_t peak_live = 0;    // Most entries held at once.
  int64_t evicted = 0;      // Entries freed for good.
  // With a demote tier: entries moved to the host tier and back, and the
  // bytes those moves copied (K and V, every layer: KvCache::entry_bytes()
  // each).
  int64_t demoted = 0;
  int64_t promoted = 0;
  int64_t bytes_moved = 0;
  // The most entries in the host tier at once. Applying a step's demotions
  // before its promotions, it can exceed the session's tier.capacity D by
  // the step's swaps, up to max_promotions P.
  int64_t peak_host = 0;
  std::vector<double> nll;  // Per position (only when asked for).
  int64_t deferred = 0;     // Steps the decider answered without deciding.
  // Attention recall (a decider that measures it, Decision::recall): over
  // the steps scored, Σ recall, Σ ln recall and Σ the oracle's recall.
  int64_t recall_steps = 0;
  double recall_sum = 0.0;
  double log_recall_sum = 0.0;
  double oracle_recall_sum = 0.0;
  // Only when asked for (record_evictions): per appended position p, the
  // first position whose token no longer attends p (its eviction applied),
  // or kNeverEvicted. With a demote tier only evictions are recorded: an
  // entry dropped from the host tier at the position of its eviction, not of
  // its demotion.
  std::vector<int32_t> evicted_at;
};

inline constexpr int32_t kNeverEvicted = std::numeric_limits<int32_t>::max();

struct EvaluateOptions {
  int lag = 0;  // 0: apply step t's evictions before token t+1; 1: before t+2.
  bool keep_per_token_nll = false;
  bool record_evictions = false;  // Fill SequenceResult::evicted_at.
  // Rows of the cache's host tier (0: no tier; a demotion is then an
  // error). For entrokv's tier, D + P: tier.capacity, and the entries a
  // step's swaps demote before its promotions free their rows.
  int host_capacity = 0;
};

// The session configuration the engine uses for this model: shape (every
// layer, kv head and q head; f32) and `budget`; the policy is left to the
// caller.
SessionConfig EngineSessionConfig(const ModelConfig& model, int64_t budget);

// `config` with an entropy-controlled budget capped at its nominal budget
// (entropy_budget.max_budget = budget): the entropy controller's B_t can fall
// below the budget, never rise above it, so no step holds more entries than
// a fixed budget would (the equal-peak comparison,
// docs/results-tinystories.md "Equal peak"). A fixed budget is unchanged in
// effect.
SessionConfig CapAtBudget(SessionConfig config);

// Evaluates `tokens` (BOS first, at most seq_len of them). With a null
// `session`, nothing is evicted (the full cache).
// InvalidArgument for fewer than 2 or more than seq_len tokens; errors of the
// decider or of freeing an answered slot are returned with the position.
absl::StatusOr<SequenceResult> EvaluateSequence(const Model& model,
                                                absl::Span<const int> tokens,
                                                DeciderSession* session,
                                                const EvaluateOptions& options);

// The TinyStories text file's stories, split on "<|endoftext|>" lines and
// stripped of surrounding whitespace; at most `max_stories` (0: all).
absl::StatusOr<std::vector<std::string>> LoadStories(const std::string& path,
                                                     int max_stories);

// BOS + the story's tokens, cut to `max_tokens`.
std::vector<int> StoryTokens(const Tokenizer& tokenizer,
                             const std::string& story, int max_tokens);

// The data folder: `flag` when non-empty, else $ENTROKV_DATA, else
// <repository>/../shared/data/tinystories when it exists, else
// ../shared/data/tinystories relative to the working directory.
std::string ResolveDataDir(const std::string& flag);

// Paths of the three data files inside `data_dir`.
std::string ModelPath(const std::string& data_dir);
std::string TokenizerPath(const std::string& data_dir);
std::string StoriesPath(const std::string& data_dir);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_EVALUATOR_H_
