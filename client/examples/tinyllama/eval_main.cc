// entrokv-eval: perplexity of stories260K on TinyStories against KV-cache
// memory, for every entrokv policy (ranking × budget controller).
//
// For each policy and nominal budget the example engine evaluates the first
// --stories stories teacher-forced, with entrokv deciding evictions at every
// decode step (in process, or over gRPC through the client library), and
// reports perplexity and the mean and peak number of entries the model
// attended over. Policies are then compared at equal MEAN live entries
// (DESIGN.md "Fair comparison"): each policy's log-perplexity is interpolated
// linearly in mean live entries between its two measured budgets that bracket
// each target. The pipelined mode (evictions applied one token late) is run at
// a few budgets beside the immediate mode.
//
// Writes <out>/tinystories_runs.csv, <out>/tinystories_results.json and, with
// gnuplot, <out>/tinystories_ppl_vs_live.png.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "entrokv/core/config.h"
#include "entrokv/core/status_macros.h"
#include "tinyllama/decider.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/model.h"
#include "tinyllama/tokenizer.h"
#ifdef ENTROKV_TINYLLAMA_HAVE_CLIENT
#include "tinyllama/grpc_decider.h"
#endif

ABSL_FLAG(std::string, data, "",
          "Folder with stories260K.bin, tok512.bin and "
          "tinystories_valid_head.txt (default: $ENTROKV_DATA, else "
          "<repo>/../shared/data/tinystories).");
ABSL_FLAG(int, stories, 20, "Stories to evaluate, from the first.");
ABSL_FLAG(std::string, budgets, "16,32,64,128,192,256",
          "Nominal budgets B (live entries) to sweep.");
ABSL_FLAG(std::string, targets, "24,32,48,64,96",
          "Mean live entries at which policies are compared.");
ABSL_FLAG(std::string, policies, "all",
          "Comma-separated policy names (RANKING+CONTROL), or 'all'.");
ABSL_FLAG(std::string, pipelined_budgets, "64",
          "Budgets at which every policy is also run one step late.");
ABSL_FLAG(bool, inprocess, false,
          "Decide in this process with entrokv core instead of over gRPC.");
ABSL_FLAG(std::string, server, "localhost:50051",
          "entrokv server target for the gRPC decider.");
ABSL_FLAG(std::string, out, "eval-out", "Output folder.");
ABSL_FLAG(int, threads, 1, "Runs evaluated in parallel.");
ABSL_FLAG(bool, plot, true, "Draw the PNG with gnuplot.");

namespace entrokv::tinyllama {
namespace {

struct Run {
  SessionConfig config;  // Budget and policy; the shape is the engine's.
  std::string policy;
  int lag = 0;
  // Results.
  double nll_sum = 0.0;
  int64_t predicted = 0;
  int64_t live_sum = 0;
  int64_t peak_live = 0;
  int64_t evicted = 0;
  double seconds = 0.0;
  double ppl() const { return std::exp(nll_sum / predicted); }
  double mean_live() const { return static_cast<double>(live_sum) / predicted; }
};

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& text,
                                               const char* flag) {
  std::vector<int64_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a positive integer"));
    }
    values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  return values;
}

absl::StatusOr<std::vector<SessionConfig>> Policies(const ModelConfig& model,
                                                    const std::string& flag) {
  std::vector<SessionConfig> policies;
  if (flag == "all") {
    for (Ranking ranking : kAllRankings) {
      for (BudgetControl control : kAllBudgetControls) {
        SessionConfig config = EngineSessionConfig(model, 1);
        config.ranking = ranking;
        config.budget_control = control;
        policies.push_back(config);
      }
    }
    return policies;
  }
  for (absl::string_view name : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
    SessionConfig config = EngineSessionConfig(model, 1);
    const std::string n(name);
    ENTROKV_RETURN_IF_ERROR(ApplyPolicyName(n, &config));
    policies.push_back(config);
  }
  return policies;
}

absl::Status Evaluate(const Model& model,
                      const std::vector<std::vector<int>>& stories,
                      Decider* decider, Run* run) {
  const auto start = std::chrono::steady_clock::now();
  EvaluateOptions options;
  options.lag = run->lag;
  for (const std::vector<int>& tokens : stories) {
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
  }
  run->seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return absl::OkStatus();
}

// Perplexity at `target` mean live entries: log-perplexity interpolated
// linearly in mean live between the two measured points around it; NaN when
// the target is outside the measured range.
double PplAtMeanLive(std::vector<const Run*> points, double target) {
  std::sort(points.begin(), points.end(), [](const Run* a, const Run* b) {
    return a->mean_live() < b->mean_live();
  });
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const double x0 = points[i]->mean_live(), x1 = points[i + 1]->mean_live();
    if (target >= x0 && target <= x1) {
      const double y0 = std::log(points[i]->ppl());
      const double y1 = std::log(points[i + 1]->ppl());
      const double w = x1 > x0 ? (target - x0) / (x1 - x0) : 0.0;
      return std::exp(y0 + w * (y1 - y0));
    }
  }
  if (points.size() == 1 && points[0]->mean_live() == target) {
    return points[0]->ppl();
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::string Num(double v, int precision = 4) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.*f", precision, v);
}

absl::Status WriteFile(const std::filesystem::path& path,
                       const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("cannot write '", path.string(), "'"));
  }
  return absl::OkStatus();
}

absl::Status Main() {
  const std::string data_dir = ResolveDataDir(absl::GetFlag(FLAGS_data));
  ENTROKV_ASSIGN_OR_RETURN(Model model, Model::Load(ModelPath(data_dir)));
  ENTROKV_ASSIGN_OR_RETURN(
      Tokenizer tokenizer,
      Tokenizer::Load(TokenizerPath(data_dir), model.config().vocab_size));
  ENTROKV_ASSIGN_OR_RETURN(
      std::vector<std::string> texts,
      LoadStories(StoriesPath(data_dir), absl::GetFlag(FLAGS_stories)));
  std::vector<std::vector<int>> stories;
  int64_t tokens = 0;
  for (const std::string& text : texts) {
    stories.push_back(StoryTokens(tokenizer, text, model.config().seq_len));
    tokens += stories.back().size();
  }
  ENTROKV_ASSIGN_OR_RETURN(std::vector<int64_t> budgets,
                           ParseList(absl::GetFlag(FLAGS_budgets), "budgets"));
  ENTROKV_ASSIGN_OR_RETURN(std::vector<int64_t> targets,
                           ParseList(absl::GetFlag(FLAGS_targets), "targets"));
  ENTROKV_ASSIGN_OR_RETURN(
      std::vector<int64_t> pipelined,
      ParseList(absl::GetFlag(FLAGS_pipelined_budgets), "pipelined_budgets"));
  ENTROKV_ASSIGN_OR_RETURN(
      std::vector<SessionConfig> policies,
      Policies(model.config(), absl::GetFlag(FLAGS_policies)));

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
  std::printf("data %s: %zu stories, %lld tokens; decider %s\n",
              data_dir.c_str(), stories.size(), static_cast<long long>(tokens),
              decider->Describe().c_str());

  Run full;
  full.policy = "full";
  ENTROKV_RETURN_IF_ERROR(Evaluate(model, stories, nullptr, &full));
  std::printf("full cache: ppl %.4f (nll %.6f), mean live %.1f, peak %lld\n",
              full.ppl(), full.nll_sum / full.predicted, full.mean_live(),
              static_cast<long long>(full.peak_live));

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
      "perplexity,ppl_increase_pct,mean_live,peak_live,evicted,seconds\n";
  auto csv_row = [&](const Run& r, const std::string& ranking,
                     const std::string& control) {
    absl::StrAppend(&csv, r.policy, ",", ranking, ",", control, ",",
                    r.config.budget, ",", r.lag, ",", stories.size(), ",",
                    r.predicted, ",", Num(r.nll_sum / r.predicted, 6), ",",
                    Num(r.ppl()), ",",
                    Num(100.0 * (r.ppl() / full.ppl() - 1.0), 2), ",",
                    Num(r.mean_live(), 2), ",", r.peak_live, ",", r.evicted,
                    ",", Num(r.seconds, 2), "\n");
  };
  full.config.budget = 0;
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
        "\", \"budget\": ", r.config.budget, ", \"lag\": ", r.lag,
        ", \"nll\": ", Num(r.nll_sum / r.predicted, 6),
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
  absl::SetProgramUsageMessage(
      "Perplexity of stories260K against KV-cache memory for every entrokv "
      "policy.\n  entrokv-eval --inprocess [--stories 20] [--out DIR]");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = entrokv::tinyllama::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "entrokv-eval: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
