// The C++ engine's results for tests/python/test_torch_tinyllama.py: per story,
// its token ids, teacher-forced NLL and, per position, the first position whose
// token no longer attends it (evicted_at), with entrokv core deciding in
// process (eval/tinyllama).
//
// Usage: tinyllama_ref DATA_DIR POLICY|full BUDGET STORIES MAX_TOKENS
// Prints per story: "T id...", "N nll_sum(%.17g) live_sum", "E evicted_at...".
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "entrokv/core/config.h"
#include "tinyllama/decider.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/model.h"
#include "tinyllama/tokenizer.h"

using namespace entrokv;
using namespace entrokv::tinyllama;

int main(int argc, char** argv) {
  if (argc != 6) return 2;
  const std::string dir = argv[1], policy = argv[2];
  const int64_t budget = std::atoll(argv[3]);
  const int stories = std::atoi(argv[4]), max_tokens = std::atoi(argv[5]);
  auto model = Model::Load(ModelPath(dir));
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().ToString().c_str()), 1;
  auto tok = Tokenizer::Load(TokenizerPath(dir), model->config().vocab_size);
  if (!tok.ok()) return 1;
  auto texts = LoadStories(StoriesPath(dir), stories);
  if (!texts.ok()) return 1;
  auto decider = CreateInProcessDecider();
  if (!decider.ok()) return 1;
  for (const std::string& text : *texts) {
    std::vector<int> tokens = StoryTokens(*tok, text, max_tokens);
    std::unique_ptr<DeciderSession> session;
    if (policy != "full") {
      SessionConfig config = EngineSessionConfig(model->config(), budget);
      if (!ApplyPolicyName(policy, &config).ok()) return 3;
      auto opened = (*decider)->Open(config);
      if (!opened.ok()) return std::fprintf(stderr, "%s\n", opened.status().ToString().c_str()), 1;
      session = *std::move(opened);
    }
    EvaluateOptions options;
    options.record_evictions = true;
    auto r = EvaluateSequence(*model, tokens, session.get(), options);
    if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().ToString().c_str()), 1;
    std::printf("T");
    for (int t : tokens) std::printf(" %d", t);
    std::printf("\nN %.17g %lld\nE", r->nll_sum, static_cast<long long>(r->live_sum));
    for (int32_t e : r->evicted_at) std::printf(" %d", e);
    std::printf("\n");
    if (session) (void)session->Close();
  }
  return 0;
}
