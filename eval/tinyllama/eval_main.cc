// entrokv-eval: perplexity of stories260K on TinyStories against KV-cache
// memory, for every entrokv policy (ranking × budget controller), with the
// example engine evaluating the stories teacher-forced and entrokv deciding
// evictions at every decode step (in process, or over gRPC through the
// client library).
//
// The default run is the protocol (eval_protocol.h): tune on a tuning split,
// then every policy calibrated to each target mean live on a disjoint test
// split and compared with window+fixed. --sweep runs every policy at nominal
// budgets instead (eval_sweep.h); --fidelity measures what a cheaper way of
// scoring costs (eval_fidelity.h); --tier compares a demote tier with
// eviction only (eval_tier.h). The flags are in eval_flags.cc; the
// variant flags (--sketch, --query_form, --scored_layers, --decide_every,
// --block_size, --block_summary) apply to every policy (eval_policies.h).

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/flags.h"
#include "common/logging.h"
#include "entrokv/core/config.h"
#include "entrokv/core/status_macros.h"
#include "tinyllama/decider.h"
#include "tinyllama/eval_fidelity.h"
#include "tinyllama/eval_flags.h"
#include "tinyllama/eval_output.h"
#include "tinyllama/eval_policies.h"
#include "tinyllama/eval_protocol.h"
#include "tinyllama/eval_run.h"
#include "tinyllama/eval_sweep.h"
#include "tinyllama/eval_tier.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/model.h"
#include "tinyllama/progress.h"
#include "tinyllama/tokenizer.h"
#ifdef ENTROKV_TINYLLAMA_HAVE_CLIENT
#include "tinyllama/grpc_decider.h"
#endif

namespace entrokv::tinyllama {
namespace {

// The model and the stories, tokenized; every failure is bad input.
struct EvalData {
  std::string dir;
  Model model;
  std::vector<std::vector<int>> stories;
  int64_t tokens = 0;
};

absl::StatusOr<EvalData> LoadData(bool protocol) {
  const std::string data_dir = ResolveDataDir(absl::GetFlag(FLAGS_data));
  absl::StatusOr<Model> loaded = Model::Load(ModelPath(data_dir));
  if (!loaded.ok()) return BadInput(loaded.status());
  EvalData data{data_dir, *std::move(loaded), {}, 0};
  absl::StatusOr<Tokenizer> loaded_tokenizer =
      Tokenizer::Load(TokenizerPath(data_dir), data.model.config().vocab_size);
  if (!loaded_tokenizer.ok()) return BadInput(loaded_tokenizer.status());
  Tokenizer tokenizer = *std::move(loaded_tokenizer);
  int max_stories = absl::GetFlag(FLAGS_stories);
  if (max_stories == 0 && !protocol) max_stories = 20;
  if (max_stories == 0 && absl::GetFlag(FLAGS_quick)) max_stories = 16;
  absl::StatusOr<std::vector<std::string>> texts =
      LoadStories(StoriesPath(data_dir), max_stories);
  if (!texts.ok()) return BadInput(texts.status());
  for (const std::string& text : *texts) {
    data.stories.push_back(
        StoryTokens(tokenizer, text, data.model.config().seq_len));
    data.tokens += data.stories.back().size();
  }
  return data;
}

absl::StatusOr<std::unique_ptr<Decider>> MakeDecider() {
  if (absl::GetFlag(FLAGS_inprocess)) {
    return CreateInProcessDecider(BackendKind::kCpu,
                                  absl::GetFlag(FLAGS_recall));
  }
  if (absl::GetFlag(FLAGS_recall)) {
    return BadInput(absl::InvalidArgumentError(
        "--recall needs --inprocess: recall is measured in this process"));
  }
#ifdef ENTROKV_TINYLLAMA_HAVE_CLIENT
  return CreateGrpcDecider(absl::GetFlag(FLAGS_server));
#else
  return absl::UnimplementedError(
      "this entrokv-eval was built without the client library: pass "
      "--inprocess");
#endif
}

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
  const bool tier = absl::GetFlag(FLAGS_tier);
  if (tier && (absl::GetFlag(FLAGS_sweep) || absl::GetFlag(FLAGS_fidelity))) {
    return BadInput(absl::InvalidArgumentError(
        "--tier is a mode of its own: not with --sweep or --fidelity"));
  }
  const bool protocol =
      !absl::GetFlag(FLAGS_sweep) && !absl::GetFlag(FLAGS_fidelity) && !tier;
  // The lists first: a bad command line is refused before any file is read.
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
  // The protocol and --tier split every story into tuning and test.
  ENTROKV_ASSIGN_OR_RETURN(EvalData data, LoadData(protocol || tier));
  std::string policy_flag = absl::GetFlag(FLAGS_policies);
  if (tier && policy_flag == "all") policy_flag = kTierDefaultPolicies;
  absl::StatusOr<std::vector<PolicyPair>> named_pairs =
      Policies(data.model.config(), policy_flag);
  if (!named_pairs.ok()) return BadInput(named_pairs.status());
  const std::vector<PolicyPair> pairs = *std::move(named_pairs);
  std::vector<SessionConfig> policies;
  for (const PolicyPair& pair : pairs) policies.push_back(pair.variant);
  ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<Decider> decider, MakeDecider());
  std::printf("data %s: %zu stories, %lld tokens; decider %s; variant %s\n",
              data.dir.c_str(), data.stories.size(),
              static_cast<long long>(data.tokens), decider->Describe().c_str(),
              VariantLabel(policies[0]).c_str());

  const Model& model = data.model;
  if (tier) return TierComparison(model, data.stories, decider.get(), policies);
  if (protocol) {
    return Protocol(model, data.stories, decider.get(), data.dir, policies,
                    targets);
  }
  Run full;
  full.policy = "full";
  ENTROKV_RETURN_IF_ERROR(Evaluate(model, data.stories, nullptr, &full));
  std::printf("full cache: ppl %.4f (nll %.6f), mean live %.1f, peak %lld\n",
              full.ppl(), full.nll_sum / full.predicted, full.mean_live(),
              static_cast<long long>(full.peak_live));
  if (absl::GetFlag(FLAGS_fidelity)) {
    const std::filesystem::path out_dir = absl::GetFlag(FLAGS_out);
    ENTROKV_RETURN_IF_ERROR(CreateOutputDir(out_dir));
    return Fidelity(model, data.stories, decider.get(), pairs, targets,
                    out_dir);
  }
  return Sweep(model, data.stories, decider.get(), data.dir, policies, budgets,
               pipelined, targets, std::move(full));
}

}  // namespace
}  // namespace entrokv::tinyllama

int main(int argc, char** argv) {
  entrokv::ParseFlags(argc, argv, entrokv::tinyllama::EvalProgramInfo());
  // The results are standard output; logs go aside.
  if (absl::Status status = entrokv::InitLogging(entrokv::LogStream::kStderr);
      !status.ok()) {
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
