// entrokv-eval: perplexity of stories260K on TinyStories against KV-cache
// memory, for every entrokv policy (ranking × budget controller).
//
// The default run is the protocol (docs/results-tinystories.md): the stories
// are split into a tuning set (the first --tune) and a disjoint test set (the
// rest). On the tuning stories a small grid of policy parameters (affinity
// lambda / update rule, entropy-budget gamma and EMA rate, h2o's recent share,
// streaming's sinks) is searched at one target mean live (--tune_target).
// Then every policy, with the tuned parameters, is calibrated on the test
// stories to each target mean live (--targets) by a search on the integer
// nominal budget (SearchBudget: a run within --tolerance of the target, else
// the adjacent budgets B, B+1 around it, interpolated), with the example
// engine evaluating the stories teacher-forced and entrokv deciding evictions
// at every decode step (in process, or over gRPC through the client library).
// Each policy's perplexity is compared with window+fixed at the same target by
// a paired bootstrap over test stories (docs/design.md "Fair comparison": equal
// MEAN live entries). Writes <out>/tinystories_report.md,
// tinystories_protocol.csv, tinystories_runs.csv, tinystories_results.json
// and, with gnuplot, tinystories_ppl_vs_live.png.
//
// --sweep runs every policy at nominal --budgets instead (curves; log-
// perplexity interpolated between measured budgets at each target) and, one
// token late, at --pipelined_budgets.
//
// Variants (--sketch, --query_form, --scored_layers, --decide_every,
// --block_size, --block_summary) apply a cheaper way of scoring to every
// policy. --fidelity measures what a variant costs (docs/fidelity.md): each
// policy is run scored exactly and with the variant; for each target mean
// live T the nominal budget of each is searched until two adjacent budgets
// bracket T, log-perplexity is interpolated between them, and the evictions of
// the two at the same nominal budget are compared. Writes
// <out>/fidelity.csv.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/logging.h"
#include "entrokv/core/config.h"
#include "entrokv/core/status_macros.h"
#include "eval/lib/budget_search.h"
#include "eval/lib/interpolate.h"
#include "eval/lib/overlap.h"
#include "tinyllama/calibrate.h"
#include "tinyllama/decider.h"
#include "tinyllama/eval_curve.h"
#include "tinyllama/eval_fidelity.h"
#include "tinyllama/eval_flags.h"
#include "tinyllama/eval_output.h"
#include "tinyllama/eval_policies.h"
#include "tinyllama/eval_protocol.h"
#include "tinyllama/eval_run.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/progress.h"
#include "tinyllama/model.h"
#include "tinyllama/tokenizer.h"
#ifdef ENTROKV_TINYLLAMA_HAVE_CLIENT
#include "tinyllama/grpc_decider.h"
#endif

namespace entrokv::tinyllama {
namespace {

absl::Status Main() {
  std::unique_ptr<EvalProgress> shown;
  if (absl::GetFlag(FLAGS_progress)) shown = EvalProgress::OnStderr();
  SetEvalProgress(shown.get());
  struct EndLine {
    EvalProgress* progress;
    ~EndLine() {
      if (progress != nullptr) progress->Finish();
      SetEvalProgress(nullptr);
    }
  } end_line{shown.get()};
  const std::string data_dir = ResolveDataDir(absl::GetFlag(FLAGS_data));
  absl::StatusOr<Model> loaded = Model::Load(ModelPath(data_dir));
  if (!loaded.ok()) return BadInput(loaded.status());
  Model model = *std::move(loaded);
  absl::StatusOr<Tokenizer> loaded_tokenizer =
      Tokenizer::Load(TokenizerPath(data_dir), model.config().vocab_size);
  if (!loaded_tokenizer.ok()) return BadInput(loaded_tokenizer.status());
  Tokenizer tokenizer = *std::move(loaded_tokenizer);
  const bool protocol =
      !absl::GetFlag(FLAGS_sweep) && !absl::GetFlag(FLAGS_fidelity);
  int max_stories = absl::GetFlag(FLAGS_stories);
  if (max_stories == 0 && !protocol) max_stories = 20;
  if (max_stories == 0 && absl::GetFlag(FLAGS_quick)) max_stories = 16;
  absl::StatusOr<std::vector<std::string>> texts =
      LoadStories(StoriesPath(data_dir), max_stories);
  if (!texts.ok()) return BadInput(texts.status());
  std::vector<std::vector<int>> stories;
  int64_t tokens = 0;
  for (const std::string& text : *texts) {
    stories.push_back(StoryTokens(tokenizer, text, model.config().seq_len));
    tokens += stories.back().size();
  }
  ENTROKV_ASSIGN_OR_RETURN(std::vector<int64_t> budgets,
                           ParseList(absl::GetFlag(FLAGS_budgets), "budgets"));
  ENTROKV_ASSIGN_OR_RETURN(
      std::vector<int64_t> targets,
      ParseList(absl::GetFlag(FLAGS_quick) ? std::string("32,64")
                                           : absl::GetFlag(FLAGS_targets),
                "targets"));
  ENTROKV_ASSIGN_OR_RETURN(
      std::vector<int64_t> pipelined,
      ParseList(absl::GetFlag(FLAGS_pipelined_budgets), "pipelined_budgets"));
  absl::StatusOr<std::vector<PolicyPair>> named_pairs =
      Policies(model.config(), absl::GetFlag(FLAGS_policies));
  if (!named_pairs.ok()) return BadInput(named_pairs.status());
  const std::vector<PolicyPair> pairs = *std::move(named_pairs);
  std::vector<SessionConfig> policies;
  for (const PolicyPair& pair : pairs) policies.push_back(pair.variant);

  std::unique_ptr<Decider> decider;
  if (absl::GetFlag(FLAGS_inprocess)) {
    ENTROKV_ASSIGN_OR_RETURN(decider, CreateInProcessDecider());
  } else {
#ifdef ENTROKV_TINYLLAMA_HAVE_CLIENT
    ENTROKV_ASSIGN_OR_RETURN(decider,
                             CreateGrpcDecider(absl::GetFlag(FLAGS_server)));
#else
    return absl::UnimplementedError(
        "this entrokv-eval was built without the client library: pass "
        "--inprocess");
#endif
  }
  std::printf("data %s: %zu stories, %lld tokens; decider %s; variant %s\n",
              data_dir.c_str(), stories.size(), static_cast<long long>(tokens),
              decider->Describe().c_str(), VariantLabel(policies[0]).c_str());

  if (protocol) {
    return Protocol(model, stories, decider.get(), data_dir, policies, targets);
  }

  Run full;
  full.policy = "full";
  ENTROKV_RETURN_IF_ERROR(Evaluate(model, stories, nullptr, &full));
  std::printf("full cache: ppl %.4f (nll %.6f), mean live %.1f, peak %lld\n",
              full.ppl(), full.nll_sum / full.predicted, full.mean_live(),
              static_cast<long long>(full.peak_live));

  if (absl::GetFlag(FLAGS_fidelity)) {
    const std::filesystem::path out_dir = absl::GetFlag(FLAGS_out);
    std::error_code error;
    std::filesystem::create_directories(out_dir, error);
    if (error) {
      return absl::UnavailableError(absl::StrCat(
          "cannot create '", out_dir.string(), "': ", error.message()));
    }
    return Fidelity(model, stories, decider.get(), pairs, targets, out_dir);
  }

  std::vector<Run> runs;
  for (const SessionConfig& policy : policies) {
    for (int64_t budget : budgets) {
      for (int lag : {0, 1}) {
        if (lag == 1 &&
            !std::binary_search(pipelined.begin(), pipelined.end(), budget)) {
          continue;
        }
        Run run;
        run.config = policy;
        run.config.budget = budget;
        run.policy = PolicyName(run.config);
        run.variant = VariantLabel(run.config);
        run.lag = lag;
        runs.push_back(run);
      }
    }
  }

  // Runs are independent: each worker takes the next one.
  std::atomic<size_t> next{0};
  std::mutex mu;
  absl::Status failure;
  auto worker = [&]() {
    for (size_t i = next++; i < runs.size(); i = next++) {
      absl::Status status = Evaluate(model, stories, decider.get(), &runs[i]);
      std::lock_guard<std::mutex> lock(mu);
      if (!status.ok()) {
        if (failure.ok()) {
          failure = absl::Status(
              status.code(),
              absl::StrCat(runs[i].policy, " B=", runs[i].config.budget, ": ",
                           status.message()));
        }
        next = runs.size();
        return;
      }
      std::printf(
          "%-20s B=%-4lld lag %d: ppl %8.4f  mean live %6.1f  "
          "peak %4lld  (%.1fs)\n",
          runs[i].policy.c_str(), static_cast<long long>(runs[i].config.budget),
          runs[i].lag, runs[i].ppl(), runs[i].mean_live(),
          static_cast<long long>(runs[i].peak_live), runs[i].seconds);
      std::fflush(stdout);
    }
  };
  const int threads = std::max(1, absl::GetFlag(FLAGS_threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  ENTROKV_RETURN_IF_ERROR(failure);

  // Equal mean live: one row per policy, one column per target.
  std::vector<std::string> policy_names;
  std::map<std::string, std::vector<const Run*>> immediate;
  for (const Run& run : runs) {
    if (run.lag != 0) continue;
    if (immediate.find(run.policy) == immediate.end()) {
      policy_names.push_back(run.policy);
    }
    immediate[run.policy].push_back(&run);
  }

  const std::filesystem::path out_dir = absl::GetFlag(FLAGS_out);
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create '", out_dir.string(), "': ", error.message()));
  }

  // CSV: every run.
  std::string csv =
      "policy,ranking,budget_control,budget,lag,stories,tokens_scored,nll,"
      "perplexity,ppl_increase_pct,mean_live,peak_live,evicted,seconds,"
      "variant\n";
  auto csv_row = [&](const Run& r, const std::string& ranking,
                     const std::string& control) {
    absl::StrAppend(&csv, r.policy, ",", ranking, ",", control, ",",
                    r.config.budget, ",", r.lag, ",", stories.size(), ",",
                    r.predicted, ",", Num(r.nll_sum / r.predicted, 6), ",",
                    Num(r.ppl()), ",",
                    Num(100.0 * (r.ppl() / full.ppl() - 1.0), 2), ",",
                    Num(r.mean_live(), 2), ",", r.peak_live, ",", r.evicted,
                    ",", Num(r.seconds, 2), ",\"", r.variant, "\"\n");
  };
  full.config.budget = 0;
  full.variant = "full";
  csv_row(full, "full", "none");
  for (const Run& r : runs) {
    csv_row(r, std::string(RankingName(r.config.ranking)),
            std::string(BudgetControlName(r.config.budget_control)));
  }
  ENTROKV_RETURN_IF_ERROR(WriteFile(out_dir / "tinystories_runs.csv", csv));

  // Markdown tables to stdout, JSON to a file.
  std::string md = absl::StrCat(
      "\nPerplexity at equal mean live entries (log-ppl interpolated in mean "
      "live between measured budgets; full cache ",
      Num(full.ppl()), ", mean live ", Num(full.mean_live(), 1), ")\n\n",
      "| policy |");
  for (int64_t t : targets) absl::StrAppend(&md, " live ", t, " |");
  absl::StrAppend(&md, "\n|---|");
  for (size_t i = 0; i < targets.size(); ++i) absl::StrAppend(&md, "---:|");
  absl::StrAppend(&md, "\n");
  std::string json_equal;
  for (const std::string& name : policy_names) {
    absl::StrAppend(&md, "| ", name, " |");
    absl::StrAppend(&json_equal, json_equal.empty() ? "" : ",\n",
                    "    {\"policy\": \"", name, "\", \"perplexity\": [");
    for (size_t i = 0; i < targets.size(); ++i) {
      const double ppl =
          PplAtMeanLive(immediate[name], static_cast<double>(targets[i]));
      absl::StrAppend(&md, " ", std::isfinite(ppl) ? Num(ppl, 3) : "—", " |");
      absl::StrAppend(&json_equal, i ? ", " : "", Num(ppl));
    }
    absl::StrAppend(&md, "\n");
    absl::StrAppend(&json_equal, "]}");
  }

  absl::StrAppend(&md,
                  "\nPipelined (evictions one token late) against immediate\n\n"
                  "| policy | B | ppl immediate | ppl one step late | mean "
                  "live immediate | mean live late |\n|---|---:|---:|---:|---:|"
                  "---:|\n");
  for (const Run& late : runs) {
    if (late.lag != 1) continue;
    for (const Run& now : runs) {
      if (now.lag == 0 && now.policy == late.policy &&
          now.config.budget == late.config.budget) {
        absl::StrAppend(&md, "| ", late.policy, " | ", late.config.budget,
                        " | ", Num(now.ppl(), 3), " | ", Num(late.ppl(), 3),
                        " | ", Num(now.mean_live(), 1), " | ",
                        Num(late.mean_live(), 1), " |\n");
      }
    }
  }
  std::printf("%s", md.c_str());

  std::string json = absl::StrCat(
      "{\n  \"data\": \"", data_dir, "\",\n  \"decider\": \"",
      decider->Describe(), "\",\n  \"stories\": ", stories.size(),
      ",\n  \"tokens_scored\": ", full.predicted,
      ",\n  \"full_cache\": {\"nll\": ", Num(full.nll_sum / full.predicted, 6),
      ", \"perplexity\": ", Num(full.ppl()),
      ", \"mean_live\": ", Num(full.mean_live(), 2),
      ", \"peak_live\": ", full.peak_live, "},\n  \"runs\": [\n");
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    absl::StrAppend(
        &json, "    {\"policy\": \"", r.policy, "\", \"ranking\": \"",
        std::string(RankingName(r.config.ranking)),
        "\", \"budget_control\": \"",
        std::string(BudgetControlName(r.config.budget_control)),
        "\", \"variant\": \"", r.variant, "\", \"budget\": ", r.config.budget,
        ", \"lag\": ", r.lag, ", \"nll\": ", Num(r.nll_sum / r.predicted, 6),
        ", \"perplexity\": ", Num(r.ppl()),
        ", \"mean_live\": ", Num(r.mean_live(), 2),
        ", \"peak_live\": ", r.peak_live, ", \"evicted\": ", r.evicted,
        ", \"seconds\": ", Num(r.seconds, 2), "}",
        i + 1 < runs.size() ? ",\n" : "\n");
  }
  absl::StrAppend(&json, "  ],\n  \"equal_mean_live\": {\n    \"method\": ",
                  "\"log-perplexity interpolated linearly in mean live "
                  "entries between the two measured budgets around each "
                  "target; null outside the measured range\",\n    "
                  "\"targets\": [",
                  absl::StrJoin(targets, ", "), "],\n    \"policies\": [\n",
                  json_equal, "\n    ]\n  }\n}\n");
  ENTROKV_RETURN_IF_ERROR(
      WriteFile(out_dir / "tinystories_results.json", json));

  if (absl::GetFlag(FLAGS_plot)) {
    // One data block per policy (immediate mode), sorted by mean live.
    std::string dat;
    std::string plot = absl::StrCat(
        "set terminal pngcairo size 1000,650 font 'sans,10'\n"
        "set output '",
        (out_dir / "tinystories_ppl_vs_live.png").string(),
        "'\nset title 'stories260K on ", stories.size(),
        " TinyStories stories: perplexity vs mean live KV entries'\n"
        "set xlabel 'mean live entries per decode step'\n"
        "set ylabel 'perplexity (log scale)'\nset logscale y\n"
        "set key outside right\nset grid\n"
        "set yrange [",
        Num(0.97 * full.ppl(), 3),
        ":*]\n"
        "plot ");
    int index = 0;
    for (const std::string& name : policy_names) {
      std::vector<const Run*> points = immediate[name];
      std::sort(points.begin(), points.end(), [](const Run* a, const Run* b) {
        return a->mean_live() < b->mean_live();
      });
      absl::StrAppend(&dat, "# ", name, "\n");
      for (const Run* r : points) {
        absl::StrAppend(&dat, Num(r->mean_live(), 3), " ", Num(r->ppl(), 5),
                        "\n");
      }
      absl::StrAppend(&dat, "\n\n");
      const bool entropy =
          points[0]->config.budget_control == BudgetControl::kEntropy;
      const int color = static_cast<int>(points[0]->config.ranking) + 1;
      absl::StrAppend(
          &plot, "'", (out_dir / "tinystories_ppl_vs_live.dat").string(),
          "' index ", index++, " with linespoints lc ", color, " dt ",
          entropy ? 2 : 1, " pt ", entropy ? 6 : 7, " title '", name, "', ");
    }
    absl::StrAppend(&plot, Num(full.ppl(), 5),
                    " with lines lc rgb 'black' dt 3 title 'full cache'\n");
    ENTROKV_RETURN_IF_ERROR(
        WriteFile(out_dir / "tinystories_ppl_vs_live.dat", dat));
    ENTROKV_RETURN_IF_ERROR(
        WriteFile(out_dir / "tinystories_ppl_vs_live.gp", plot));
    const std::string command = absl::StrCat(
        "gnuplot '", (out_dir / "tinystories_ppl_vs_live.gp").string(), "'");
    if (std::system(command.c_str()) != 0) {
      std::fprintf(stderr, "gnuplot failed; the data and script are in %s\n",
                   out_dir.string().c_str());
    }
  }
  std::printf("\nwrote %s/tinystories_runs.csv, tinystories_results.json%s\n",
              out_dir.string().c_str(),
              absl::GetFlag(FLAGS_plot) ? ", tinystories_ppl_vs_live.png" : "");
  return absl::OkStatus();
}

}  // namespace
}  // namespace entrokv::tinyllama

int main(int argc, char** argv) {
  entrokv::ParseFlags(argc, argv, entrokv::tinyllama::EvalProgramInfo());
  if (absl::Status status = entrokv::InitLogging(); !status.ok()) {
    std::fprintf(stderr, "entrokv-eval: %s\n",
                 std::string(status.message()).c_str());
    return 2;
  }
  const absl::Status status = entrokv::tinyllama::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "entrokv-eval: %s: %s\n",
                 absl::StatusCodeToString(status.code()).c_str(),
                 std::string(status.message()).c_str());
    return entrokv::tinyllama::IsBadInput(status) ? 2 : 1;
  }
  return 0;
}
