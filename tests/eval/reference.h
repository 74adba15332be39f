// Test helpers: the data folder, and the independent Python reference
// (tests/eval/reference_llama.py, run with Debian's /usr/bin/python3).

#ifndef ENTROKV_TESTS_EVAL_REFERENCE_H_
#define ENTROKV_TESTS_EVAL_REFERENCE_H_

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "entrokv/core/config.h"
#include "tinyllama/evaluator.h"
#include "tinyllama/model.h"
#include "tinyllama/tokenizer.h"

namespace entrokv::tinyllama::testing {

inline constexpr char kPython[] = "/usr/bin/python3";

// The data folder when all three files are there, else "" (tests skip).
inline std::string DataDirOrEmpty() {
  const std::string dir = ResolveDataDir("");
  std::error_code error;
  for (const std::string& path :
       {ModelPath(dir), TokenizerPath(dir), StoriesPath(dir)}) {
    if (!std::filesystem::is_regular_file(path, error)) return "";
  }
  return dir;
}

#define ENTROKV_SKIP_WITHOUT_DATA(dir)                                     \
  if ((dir).empty()) {                                                     \
    GTEST_SKIP() << "TinyStories data not found (set ENTROKV_DATA or put " \
                    "it at <repo>/../shared/data/tinystories); see "       \
                    "docs/results-tinystories.md for its sources";         \
  }

// The model of `dir` and its first `stories` stories, tokenized and cut to
// `max_tokens` each: what the decider tests evaluate.
struct TestData {
  std::unique_ptr<Model> model;
  std::vector<std::vector<int>> stories;
};
inline absl::StatusOr<TestData> LoadTestData(const std::string& dir,
                                             int stories, int max_tokens) {
  absl::StatusOr<Model> model = Model::Load(ModelPath(dir));
  if (!model.ok()) return model.status();
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Load(TokenizerPath(dir), 512);
  if (!tokenizer.ok()) return tokenizer.status();
  absl::StatusOr<std::vector<std::string>> texts =
      LoadStories(StoriesPath(dir), stories);
  if (!texts.ok()) return texts.status();
  TestData data{std::make_unique<Model>(*std::move(model)), {}};
  for (const std::string& s : *texts) {
    data.stories.push_back(StoryTokens(*tokenizer, s, max_tokens));
  }
  return data;
}

#define ENTROKV_SKIP_WITHOUT_PYTHON()                                      \
  if (!std::filesystem::exists(::entrokv::tinyllama::testing::kPython)) {  \
    GTEST_SKIP() << "/usr/bin/python3 (with python3-numpy) is needed for " \
                    "the independent reference";                           \
  }

// Runs the reference with `args` and returns its stdout lines; an error when
// it exits non-zero.
inline absl::StatusOr<std::vector<std::string>> RunReference(
    const std::string& data_dir, const std::string& args) {
  const std::string command =
      absl::StrCat(kPython, " '", ENTROKV_REFERENCE_SCRIPT, "' --data '",
                   data_dir, "' ", args);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("popen failed");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    out.append(buffer, n);
  const int rc = pclose(pipe);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("'", command, "' exited ", rc));
  }
  return std::vector<std::string>(absl::StrSplit(out, '\n', absl::SkipEmpty()));
}

struct ReferenceStory {
  int tokens = 0;
  double nll_sum = 0.0;
};

// Parses "story INDEX TOKENS NLL_SUM" lines.
inline absl::StatusOr<std::vector<ReferenceStory>> ReferenceNll(
    const std::string& data_dir, const std::string& args) {
  auto lines = RunReference(data_dir, absl::StrCat("nll ", args));
  if (!lines.ok()) return lines.status();
  std::vector<ReferenceStory> stories;
  for (const std::string& line : *lines) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    ReferenceStory s;
    if (f.size() != 4 || f[0] != "story" ||
        !absl::SimpleAtoi(f[2], &s.tokens) ||
        !absl::SimpleAtod(f[3], &s.nll_sum)) {
      return absl::InternalError(absl::StrCat("bad reference line: ", line));
    }
    stories.push_back(s);
  }
  return stories;
}

// A cheaper way of scoring one policy, as the decider tests run it.
struct ScoringCase {
  const char* policy;
  int32_t sketch_dim;
  QueryForm form;
  std::vector<int32_t> layers;  // Scored layers (empty: all).
  int32_t decide_every;
  int32_t block_size;
  bool block_summary;

  // Sets the case's variant fields of `config` (the policy is the caller's).
  void ApplyTo(SessionConfig* config) const {
    config->shape.sketch_dim = sketch_dim;
    config->shape.query_form = form;
    config->scored_layers = layers;
    if (!layers.empty()) {
      config->shape.layers = static_cast<int32_t>(layers.size());
    }
    config->decide_every = decide_every;
    config->block_size = block_size;
    config->block_summary = block_summary;
  }

  // For SCOPED_TRACE.
  std::string Describe(const SessionConfig& config) const {
    return absl::StrCat(PolicyName(config), " ", SketchName(config.shape), " ",
                        std::string(QueryFormName(config.shape.query_form)),
                        " layers ", config.shape.layers, " every ",
                        decide_every, " block ", block_size,
                        block_summary ? " summary" : "");
  }
};

}  // namespace entrokv::tinyllama::testing

#endif  // ENTROKV_TESTS_EVAL_REFERENCE_H_
