#include "tinyllama/eval_protocol_compare.h"

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "entrokv/core/status_macros.h"
#include "tinyllama/eval_curve.h"
#include "tinyllama/eval_run.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/long_ppl.h"

namespace entrokv::tinyllama {

const std::vector<std::vector<uint8_t>>* KeysOf(const ProtocolResult& r) {
  return r.long_window > 0 ? &r.key_tokens : nullptr;
}

absl::Status KeyTokens(const Model& model,
                       const std::vector<std::vector<int>>& test_stories,
                       Decider* decider, ProtocolResult* r) {
  Run brief;
  brief.config = EngineSessionConfig(model.config(), r->long_window);
  ENTROKV_RETURN_IF_ERROR(ApplyPolicyName("window+fixed", &brief.config));
  brief.policy = "window+fixed";
  brief.keep_token_nll = true;
  ENTROKV_RETURN_IF_ERROR(Evaluate(model, test_stories, decider, &brief));
  double full_key_nll = 0.0, brief_key_nll = 0.0;
  for (size_t k = 0; k < r->split.test.size(); ++k) {
    const std::vector<double>& full = r->full.story_token_nll[r->split.test[k]];
    const std::vector<double>& window = brief.story_token_nll[k];
    r->key_tokens.push_back(SelectKeyTokens(full, window, r->key_params));
    const KeyNll f = SumOverKeyTokens(full, r->key_tokens.back());
    r->full_test_key_nll.push_back(f.nll);
    r->key_token_count += f.tokens;
    full_key_nll += f.nll;
    brief_key_nll += SumOverKeyTokens(window, r->key_tokens.back()).nll;
  }
  r->full_test_long_ppl = LongPerplexity(full_key_nll, r->key_token_count);
  r->short_test_long_ppl = LongPerplexity(brief_key_nll, r->key_token_count);
  r->short_test_ppl = brief.ppl();
  r->key_text = absl::StrFormat(
      "key tokens (long-range perplexity, LongPPL): %lld of %lld scored test "
      "tokens (%.2f%%), those whose NLL under window+fixed at budget %lld "
      "exceeds the full cache's by more than alpha = %g nats and whose "
      "full-cache log p exceeds beta = %g; on them the full cache's LongPPL "
      "is %.4f and the short window's %.4f (perplexity on every test token: "
      "%.4f and %.4f)",
      static_cast<long long>(r->key_token_count),
      static_cast<long long>(r->test_tokens),
      100.0 * static_cast<double>(r->key_token_count) /
          static_cast<double>(r->test_tokens),
      static_cast<long long>(r->long_window), r->key_params.alpha,
      r->key_params.beta, r->full_test_long_ppl, r->short_test_long_ppl,
      r->full_test_ppl, r->short_test_ppl);
  std::printf("%s\n", r->key_text.c_str());
  return absl::OkStatus();
}

absl::Status EqualPeak(const Model& model,
                       const std::vector<std::vector<int>>& test_stories,
                       Decider* decider, ProtocolResult* r) {
  CurveSearch sweep(model, test_stories, decider,
                    /*record_evictions=*/false, KeysOf(*r));
  r->peak_curves.resize(r->policies.size());
  r->peak_points.assign(r->policies.size(),
                        std::vector<Point>(r->targets.size()));
  std::vector<std::function<absl::Status()>> tasks;
  for (size_t i = 0; i < r->policies.size(); ++i) {
    Curve* curve = r->curves[i].get();
    // Only the entropy controller's budget rises above the nominal one.
    if (r->policies[i].budget_control == BudgetControl::kEntropy) {
      r->peak_curves[i] = std::make_unique<Curve>();
      curve = r->peak_curves[i].get();
      curve->config = r->policies[i];
      curve->label = "equal peak";
      curve->cap_at_budget = true;
    }
    tasks.push_back([&, i, curve]() -> absl::Status {
      for (size_t t = 0; t < r->targets.size(); ++t) {
        ENTROKV_ASSIGN_OR_RETURN(
            r->peak_points[i][t],
            sweep.AtBudgetsOf(curve, r->points[r->ref][t]));
      }
      return absl::OkStatus();
    });
  }
  return RunTasks(std::move(tasks), r->threads);
}

}  // namespace entrokv::tinyllama
