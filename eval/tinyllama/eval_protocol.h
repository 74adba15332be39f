// entrokv-eval's default run, the protocol (docs/results-tinystories.md):
// the stories are split into a tuning set and a disjoint test set; a small
// grid of policy parameters is searched on the tuning stories at one target
// mean live (--tune_target); then every policy, with the tuned parameters,
// is calibrated on the test stories to each target mean live (--targets) by
// budget search, and compared with window+fixed (and the full cache) by a
// paired bootstrap over test stories (docs/design.md "Fair comparison":
// equal MEAN live entries), in perplexity and in long-range perplexity over
// key tokens (long_ppl.h). With --equal_peak (the default) every policy is
// also compared at the reference's budgets with its controller capped
// there: equal PEAK live entries. With --recall (in process), each test
// point's attention recall is measured too, and the report says how well it
// ranks the points as perplexity does (Spearman ρ with a bootstrap interval,
// docs/results-tinystories.md "Does attention recall predict perplexity?").
// Writes <out>/tinystories_report.md,
// tinystories_protocol.csv, tinystories_runs.csv, tinystories_results.json
// and, with --plot, tinystories_ppl_vs_live.png
// (eval_protocol_report.h).
//
// Thread-safety: runs its own worker pool (--threads); call from one thread.

#ifndef ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_H_
#define ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "entrokv/core/config.h"
#include "tinyllama/calibrate.h"
#include "tinyllama/decider.h"
#include "tinyllama/eval_curve.h"
#include "tinyllama/eval_run.h"
#include "tinyllama/long_ppl.h"
#include "tinyllama/model.h"

namespace entrokv::tinyllama {

// One configuration tried while tuning.
struct Candidate {
  std::string group;  // The parameters it tunes.
  std::string label;
  Curve curve;
  Point point;  // At the tuning target, on the tuning stories.
};

// The policy parameters used on the test stories: those of the best
// candidate of each group, else core's defaults.
struct TunedParameters {
  SessionConfig affinity;   // affinity+fixed: affinity.
  SessionConfig entropy;    // affinity+entropy: entropy_budget.
  SessionConfig h2o;        // h2o+fixed: h2o.
  SessionConfig streaming;  // streaming+fixed: streaming_sinks.
  // Tuned only when a policy of the ranking is evaluated:
  SessionConfig expected;  // expected+fixed: expected.ema_rate.
  SessionConfig birth;     // birth+fixed: birth.weight.
  SessionConfig rkv;       // rkv+fixed: rkv.lambda.
};

// What the protocol ran and found, for the report.
struct ProtocolResult {
  // Settings (the flags, or --quick's).
  bool quick = false;
  int threads = 1;
  double tolerance = 0.0;  // Fraction of the target.
  int resamples = 0;
  uint64_t seed = 0;
  double tune_target = 0.0;
  double level = 0.95;  // Of the bootstrap intervals.
  std::vector<int64_t> targets;
  // What was evaluated.
  std::string data_dir;
  std::string decider;  // Decider::Describe().
  size_t stories = 0;   // Read; split in two below.
  StorySplit split;
  int64_t tune_tokens = 0;
  int64_t test_tokens = 0;
  std::string split_text;
  // The full cache, on every story.
  Run full;
  double full_tune_ppl = 0.0;
  double full_test_ppl = 0.0;
  std::string full_text;
  // Tuning.
  bool tuning = false;
  std::string grid_text;
  std::vector<std::unique_ptr<Candidate>> candidates;
  TunedParameters tuned;
  // Test: per policy (the reference, window+fixed, is policies[ref]) and
  // target.
  std::vector<SessionConfig> policies;
  size_t ref = 0;
  std::vector<std::unique_ptr<Curve>> curves;
  std::vector<std::vector<Point>> points;
  std::vector<std::vector<PairedDifference>> vs_ref;
  std::vector<std::vector<PairedDifference>> vs_full;
  // Long-range perplexity (long_ppl.h; --longppl_window, 0: not measured):
  // the key tokens of each test story, chosen once from the full cache and
  // window+fixed at budget long_window; how many there are; the full
  // cache's and the short window's perplexity and LongPPL on the test
  // stories; and each point's LongPPL against the reference and the full
  // cache (the same paired bootstrap, over the key tokens' NLL).
  int64_t long_window = 0;
  KeyTokenParams key_params;
  std::vector<std::vector<uint8_t>> key_tokens;
  int64_t key_token_count = 0;
  std::vector<double> full_test_key_nll;  // Per test story.
  double full_test_long_ppl = 0.0;
  double short_test_ppl = 0.0;
  double short_test_long_ppl = 0.0;
  std::string key_text;
  std::vector<std::vector<PairedDifference>> long_vs_ref;
  std::vector<std::vector<PairedDifference>> long_vs_full;
  // Equal peak (--equal_peak): every policy at the nominal budgets of the
  // reference's point at each target, combined with its weight; an
  // entropy-controlled budget is capped at the nominal one
  // (Curve::cap_at_budget, on peak_curves; null for any other control,
  // whose own curve serves). So no policy holds more entries at any step
  // than the reference; the mean is what it is.
  bool equal_peak = false;
  std::vector<std::unique_ptr<Curve>> peak_curves;
  std::vector<std::vector<Point>> peak_points;
  std::vector<std::vector<PairedDifference>> peak_vs_ref;
  std::vector<std::vector<PairedDifference>> peak_vs_full;
  std::vector<std::vector<PairedDifference>> peak_long_vs_ref;
  // --recall: how well each measure of the runs' attention recall ranks the
  // test points as perplexity does (RankAgreementBootstrap; a group is a
  // target), in RecallMeasures() order: over every policy, and over the
  // competitive ones only.
  bool recall = false;
  std::vector<MeasureAgreement> recall_agreement;
  std::vector<MeasureAgreement> recall_agreement_competitive;
};

// Whether a policy is one of the competitive ones: not keynorm or random,
// whose perplexity is far above the rest (the plot draws those in its
// log-scale panel only).
bool Competitive(const SessionConfig& config);

// The measures of attention recall the protocol compares with perplexity:
// a name, and a point's numerator and denominator for one story.
struct RecallMeasure {
  const char* name;
  const char* meaning;
  double (*num)(const StoryRecall&);
  double (*den)(const StoryRecall&);
};
const std::vector<RecallMeasure>& RecallMeasures();

// Runs the protocol for `policies` (with the variant applied) at `targets`
// on `stories`, prints the report and writes the files into --out.
absl::Status Protocol(const Model& model,
                      const std::vector<std::vector<int>>& stories,
                      Decider* decider, const std::string& data_dir,
                      std::vector<SessionConfig> policies,
                      const std::vector<int64_t>& targets);

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_EVAL_TINYLLAMA_EVAL_PROTOCOL_H_
