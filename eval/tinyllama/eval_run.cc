#include "tinyllama/eval_run.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "entrokv/core/status_macros.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/long_ppl.h"

namespace entrokv::tinyllama {
namespace {

// The progress of this process's runs; null with --progress=false.
EvalProgress* progress = nullptr;

}  // namespace

void SetEvalProgress(EvalProgress* p) { progress = p; }

absl::Status Evaluate(const Model& model,
                      const std::vector<std::vector<int>>& stories,
                      Decider* decider, Run* run) {
  const auto start = std::chrono::steady_clock::now();
  EvaluateOptions options;
  options.lag = run->lag;
  options.record_evictions = run->record_evictions;
  // Host rows for D entries and a step's swaps (EvaluateOptions); no story
  // holds more entries than seq_len.
  const TierParams& tier = run->config.tier;
  if (tier.capacity > 0) {
    options.host_capacity = static_cast<int>(std::min<int64_t>(
        tier.capacity + tier.max_promotions, model.config().seq_len));
  }
  options.keep_per_token_nll =
      run->keep_token_nll || run->key_tokens != nullptr;
  if (run->key_tokens != nullptr && run->key_tokens->size() != stories.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("evaluate: key tokens of ", run->key_tokens->size(),
                     " stories for ", stories.size(), " stories"));
  }
  if (progress != nullptr) {
    progress->RunStarted(static_cast<int64_t>(stories.size()));
  }
  for (size_t s = 0; s < stories.size(); ++s) {
    const std::vector<int>& tokens = stories[s];
    std::unique_ptr<DeciderSession> session;
    if (decider != nullptr) {
      ENTROKV_ASSIGN_OR_RETURN(session, decider->Open(run->config));
    }
    ENTROKV_ASSIGN_OR_RETURN(
        SequenceResult r,
        EvaluateSequence(model, tokens, session.get(), options));
    if (session != nullptr) ENTROKV_RETURN_IF_ERROR(session->Close());
    run->nll_sum += r.nll_sum;
    run->predicted += r.predicted;
    run->live_sum += r.live_sum;
    run->peak_live = std::max(run->peak_live, r.peak_live);
    run->evicted += r.evicted;
    run->deferred += r.deferred;
    run->demoted += r.demoted;
    run->promoted += r.promoted;
    run->bytes_moved += r.bytes_moved;
    run->peak_host = std::max(run->peak_host, r.peak_host);
    run->story_nll.push_back(r.nll_sum);
    run->story_tokens.push_back(r.predicted);
    run->story_recall.push_back(
        StoryRecall{static_cast<double>(r.recall_steps), r.recall_sum,
                    r.log_recall_sum, r.oracle_recall_sum});
    if (run->record_evictions)
      run->evicted_at.push_back(std::move(r.evicted_at));
    if (run->key_tokens != nullptr) {
      const std::vector<uint8_t>& key = (*run->key_tokens)[s];
      if (key.size() != r.nll.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("evaluate: story ", s, ": ", key.size(),
                         " key-token flags for ", r.nll.size(), " tokens"));
      }
      const KeyNll sum = SumOverKeyTokens(r.nll, key);
      run->story_key_nll.push_back(sum.nll);
      run->story_key_tokens.push_back(sum.tokens);
    }
    if (run->keep_token_nll) run->story_token_nll.push_back(std::move(r.nll));
    if (progress != nullptr) progress->StoryDone();
  }
  if (progress != nullptr) progress->RunDone();
  run->seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return absl::OkStatus();
}

absl::Status RunTasks(std::vector<std::function<absl::Status()>> tasks,
                      int threads) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  absl::Status failure;
  auto worker = [&]() {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      absl::Status status = tasks[i]();
      if (!status.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.ok()) failure = status;
        next = tasks.size();
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  return failure;
}

}  // namespace entrokv::tinyllama
