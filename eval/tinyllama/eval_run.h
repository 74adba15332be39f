// A run of entrokv-eval: one policy (and scoring variant) at one nominal
// budget over a set of stories, the example engine evaluating them
// teacher-forced with the decider choosing evictions; its totals and
// per-story results. And the worker pool the modes evaluate runs on.
//
// Thread-safety: a Run is written by the one thread that evaluates it.
// Evaluate() and RunTasks() are reentrant; the progress they report to is
// thread-safe.

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_RUN_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_RUN_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "entrokv/core/config.h"
#include "tinyllama/decider.h"
#include "tinyllama/model.h"
#include "tinyllama/progress.h"

namespace entrokv::tinyllama {

// One story's attention recall over its scored steps (SequenceResult).
struct StoryRecall {
  double steps = 0.0;  // A double: a calibrated Point interpolates it.
  double sum = 0.0;
  double log_sum = 0.0;
  double oracle_sum = 0.0;
};

struct Run {
  SessionConfig config;  // Budget, policy and variant.
  std::string policy;
  std::string variant;  // VariantLabel(config).
  int lag = 0;
  bool record_evictions = false;
  bool keep_token_nll = false;  // Fill story_token_nll.
  // Per story, the key tokens of long-range perplexity (long_ppl.h), one
  // flag per scored token; null: none (story_key_nll and story_key_tokens
  // stay empty). Not owned; outlives the evaluation.
  const std::vector<std::vector<uint8_t>>* key_tokens = nullptr;
  // Results.
  double nll_sum = 0.0;
  int64_t predicted = 0;
  int64_t live_sum = 0;
  int64_t peak_live = 0;
  int64_t evicted = 0;
  int64_t deferred = 0;
  // With a demote tier (config.tier.capacity > 0): the moves between the
  // device and the host tier, and the bytes they copied.
  int64_t demoted = 0;
  int64_t promoted = 0;
  int64_t bytes_moved = 0;
  int64_t peak_host = 0;  // The most entries in the host tier at once.
  std::vector<double> story_nll;      // Per story: Σ −log p.
  std::vector<int64_t> story_tokens;  // Per story: tokens scored.
  // Per story, Σ −log p over its key tokens and their count (key_tokens
  // only).
  std::vector<double> story_key_nll;
  std::vector<int64_t> story_key_tokens;
  // Per story, each scored token's −log p (keep_token_nll only).
  std::vector<std::vector<double>> story_token_nll;
  // Per story, SequenceResult's recall sums (all 0 when the decider does not
  // measure recall).
  std::vector<StoryRecall> story_recall;
  // Per story, SequenceResult::evicted_at (record_evictions only).
  std::vector<std::vector<int32_t>> evicted_at;
  double seconds = 0.0;
  double ppl() const { return std::exp(nll_sum / predicted); }
  double mean_live() const { return static_cast<double>(live_sum) / predicted; }
  // Per decode step (scored token).
  double promotions_per_step() const {
    return static_cast<double>(promoted) / predicted;
  }
  double bytes_moved_per_step() const {
    return static_cast<double>(bytes_moved) / predicted;
  }
};

// Where Evaluate() reports runs and stories; null (the default): nowhere.
// REQUIRES: no run is being evaluated.
void SetEvalProgress(EvalProgress* progress);

// Evaluates `run` (its config, lag, record_evictions, keep_token_nll and
// key_tokens) over `stories`, each in a session of its own opened on
// `decider` (null: the full cache, nothing evicted), and adds up its results.
// InvalidArgument when key_tokens does not hold a flag per scored token of
// each story.
absl::Status Evaluate(const Model& model,
                      const std::vector<std::vector<int>>& stories,
                      Decider* decider, Run* run);

// Runs `tasks` on `threads` workers (at least one); the first error stops
// the rest and is returned.
absl::Status RunTasks(std::vector<std::function<absl::Status()>> tasks,
                      int threads);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_RUN_H_
