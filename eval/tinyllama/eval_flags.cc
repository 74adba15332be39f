#include "tinyllama/eval_flags.h"

#include <algorithm>

#include "absl/flags/flag.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, data, "",
          "Folder with stories260K.bin, tok512.bin and "
          "tinystories_valid_head.txt (default: $ENTROKV_DATA, else "
          "<repo>/../shared/data/tinystories).");
ABSL_FLAG(int, stories, 0,
          "Stories to read, from the first (0: all 227 for the protocol, 20 "
          "for --sweep and --fidelity).");
ABSL_FLAG(int, tune, 100,
          "Protocol: the first N stories are the tuning split; the parameter "
          "search sees only them.");
ABSL_FLAG(int, test, 0,
          "Protocol: test stories, taken after the tuning split (0: all that "
          "are left). Every reported comparison is on them.");
ABSL_FLAG(bool, tuning, true,
          "Protocol: search the policy parameters on the tuning split; false: "
          "core's defaults.");
ABSL_FLAG(int, tune_target, 48,
          "Protocol: the mean live entries at which parameters are tuned.");
ABSL_FLAG(double, tolerance, 0.01,
          "Protocol: a run whose mean live is within this fraction of the "
          "target is taken as is; otherwise the adjacent budgets B, B+1 that "
          "bracket the target are interpolated.");
ABSL_FLAG(int, bootstrap, 2000,
          "Protocol: paired bootstrap resamples of the test stories.");
ABSL_FLAG(int, seed, 1, "Protocol: seed of the bootstrap.");
ABSL_FLAG(bool, quick, false,
          "Protocol in brief (for tests): 8 tuning and 8 test stories, "
          "targets 32 and 64, two candidates per tuned parameter, 200 "
          "resamples.");
ABSL_FLAG(int, longppl_window, 16,
          "Protocol: long-range perplexity (LongPPL) over key tokens, chosen "
          "once per test story: tokens whose NLL under window+fixed at this "
          "budget exceeds the full cache's by more than --longppl_alpha, and "
          "whose full-cache log-probability exceeds --longppl_beta (0: not "
          "measured).");
ABSL_FLAG(double, longppl_alpha, 2.0,
          "Protocol: key tokens need NLL(short window) - NLL(full) > this, "
          "in nats (LongPPL's alpha).");
ABSL_FLAG(double, longppl_beta, -2.0,
          "Protocol: key tokens need log p(full) > this, in nats (LongPPL's "
          "beta).");
ABSL_FLAG(bool, equal_peak, true,
          "Protocol: also compare every policy at equal peak live entries: "
          "at window+fixed's budgets for each target, an entropy-controlled "
          "budget capped there (entropy_budget.max_budget = budget).");
ABSL_FLAG(bool, sweep, false,
          "Instead of the protocol, run every policy at the nominal --budgets "
          "(curves; log-perplexity interpolated between them at --targets) "
          "and one step late at --pipelined_budgets, on --stories.");
ABSL_FLAG(std::string, budgets, "16,32,64,128,192,256",
          "--sweep: nominal budgets B (live entries).");
ABSL_FLAG(std::string, targets, "24,32,48,64,96",
          "Mean live entries at which policies are compared (protocol, "
          "--sweep and --fidelity).");
ABSL_FLAG(std::string, policies, "all",
          "Comma-separated policy names (RANKING+CONTROL), or 'all'.");
ABSL_FLAG(std::string, pipelined_budgets, "64",
          "--sweep: budgets at which every policy is also run one step "
          "late.");
ABSL_FLAG(bool, inprocess, false,
          "Decide in this process with entrokv core instead of over gRPC.");
ABSL_FLAG(bool, recall, false,
          "Protocol: also measure each run's attention recall (the server's "
          "shadowing code, in process) and report how well it ranks the "
          "policies as perplexity does (needs --inprocess).");
ABSL_FLAG(std::string, server, "unix:/run/entrokv/entrokv.sock",
          "entrokv server target for the gRPC decider (the server's default "
          "listen address by default).");
ABSL_FLAG(std::string, out, "eval-out", "Output folder.");
ABSL_FLAG(int, threads, 1, "Runs evaluated in parallel.");
ABSL_FLAG(bool, plot, true, "Draw the PNG with gnuplot.");
ABSL_FLAG(bool, progress, true,
          "Progress on stderr: runs and stories done, elapsed, ETA of the "
          "runs under way (redrawn on a terminal, a line every 10 s "
          "elsewhere).");
ABSL_FLAG(std::string, sketch, "exact",
          "Variant: keys and queries of every policy as sent: exact, or "
          "project:R (R columns of a seeded orthonormal projection, R <= "
          "head_dim 8).");
ABSL_FLAG(std::string, query_form, "per_head",
          "Variant: per_head, or group_sum (one summed query per kv head). "
          "Policies whose ranking needs each q head's query (tova, h2o, "
          "birth, rkv, expected) are skipped with a note under group_sum.");
ABSL_FLAG(
    std::string, scored_layers, "all",
    "Variant: the model layers sent to entrokv: 'all', 'default' "
    "(DefaultScoredLayers: layers 0,1,3,4 of stories260K's 5), or a comma list "
    "such as 0,2,4.");
ABSL_FLAG(int, decide_every, 1,
          "Variant: decide on every K-th step only; the steps between send "
          "keys only, and live grows up to B+K-1 between decisions.");
ABSL_FLAG(int, block_size, 1,
          "Variant: evict whole blocks of N tokens (1: token granularity).");
ABSL_FLAG(bool, block_summary, false,
          "Variant: with --block_size N >= 2, one state per full block, "
          "scored from its mean key.");
ABSL_FLAG(bool, cadence_scaled_rates, false,
          "Variant: with --decide_every K > 1, scale the per-decision rates so "
          "that the state spans as many tokens as when deciding every step: "
          "affinity lambda -> lambda^K, entropy-budget EMA rate r -> "
          "1 - (1 - r)^K.");
ABSL_FLAG(double, threshold_share, 0.5,
          "Policies with the threshold budget control (RANKING+threshold): "
          "each run at nominal budget B (the ceiling) evicts what scores "
          "below tau = share / B, a share of a uniform attention share over "
          "B entries (the scale of tova, expected and birth). > 0.");
ABSL_FLAG(bool, tier, false,
          "Instead of the protocol, compare each policy with a demote tier "
          "(docs/step-semantics.md section 12; host tier of D = "
          "--tier_share x B entries) against the same policy evicting only, "
          "at equal device memory (nominal budgets --tier_budgets), on the "
          "protocol's test stories, m and P tuned on its tuning stories "
          "(default policies: rkv+fixed,tova+fixed,affinity+fixed), in "
          "process or over gRPC (--server).");
ABSL_FLAG(std::string, tier_budgets, "24,32,48,64",
          "--tier: nominal budgets B (device entries).");
ABSL_FLAG(double, tier_share, 1.0,
          "--tier: tier capacity D as a multiple of the budget B (D = "
          "round(share x B), at least 1).");
ABSL_FLAG(std::string, tier_margins, "0,0.001,0.01,0.1",
          "--tier: promote margins m tried on the tuning stories, the "
          "default first (one value: fixed).");
ABSL_FLAG(std::string, tier_max_promotions, "8,2,32",
          "--tier: promotion caps P per step; the first with every margin, "
          "the rest at the best margin (one value: fixed).");
ABSL_FLAG(bool, fidelity, false,
          "Measure the variant against the same policies scored exactly "
          "(same block size, no sketch, per-head queries, all layers, every "
          "step) at equal mean live entries --targets, by budget search; "
          "--budgets and --pipelined_budgets are not used.");

namespace entrokv::tinyllama {

ProgramInfo EvalProgramInfo() {
  return {
      .usage =
          "Perplexity of stories260K against KV-cache memory for every "
          "entrokv policy.\n"
          "  entrokv-eval --inprocess [--threads 2] [--out DIR]   (the "
          "protocol: tune on stories 1-100, test on 101-227)\n"
          "  entrokv-eval --inprocess --quick\n"
          "  entrokv-eval --inprocess --sweep [--stories 20] [--budgets ...]\n"
          "  entrokv-eval --inprocess --fidelity --sketch project:4 "
          "[--policies ...] [--targets 32,64]\n"
          "  entrokv-eval --inprocess --tier [--tier_budgets 24,32,48,64] "
          "[--tier_share 1]\n"
          "Exit status: 0 on success, 2 on bad input (flags, or the data "
          "files they name), 1 when a run fails.",
      .source_dirs = {"eval/tinyllama/"},
      .groups = {
          {"Decider", {"inprocess", "server"}},
          {"Data", {"data", "stories"}},
          {"Protocol (the default run)",
           {"tune", "test", "tuning", "tune_target", "targets", "tolerance",
            "bootstrap", "seed", "quick", "recall", "longppl_window",
            "longppl_alpha", "longppl_beta", "equal_peak"}},
          {"Sweep and fidelity",
           {"sweep", "budgets", "pipelined_budgets", "fidelity"}},
          {"Demote tier",
           {"tier", "tier_budgets", "tier_share", "tier_margins",
            "tier_max_promotions"}},
          {"Policies and scoring variant",
           {"policies", "sketch", "query_form", "scored_layers", "decide_every",
            "block_size", "block_summary", "cadence_scaled_rates",
            "threshold_share"}},
          {"Output", {"out", "plot", "threads", "progress", "log_level"}},
      }};
}

namespace {

constexpr absl::string_view kBadInputPayload = "entrokv.eval/bad-input";

}  // namespace

absl::Status BadInput(absl::Status status) {
  if (!status.ok()) status.SetPayload(kBadInputPayload, absl::Cord("1"));
  return status;
}

bool IsBadInput(const absl::Status& status) {
  return status.GetPayload(kBadInputPayload).has_value();
}

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& text,
                                               const char* flag) {
  std::vector<int64_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      return BadInput(absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": '", part, "' is not a positive integer")));
    }
    values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  return values;
}

}  // namespace entrokv::tinyllama
