#include "tinyllama/evaluator.h"

#include <cmath>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tinyllama/ops.h"

namespace entrokv::tinyllama {

SessionConfig EngineSessionConfig(const ModelConfig& model, int64_t budget) {
  SessionConfig config;
  config.shape.layers = model.layers;
  config.shape.kv_heads = model.kv_heads;
  config.shape.q_heads = model.heads;
  config.shape.head_dim = model.head_dim();
  config.shape.element_type = ElementType::kF32;
  config.budget = budget;
  config.placement = Placement::kCpu;
  return config;
}

SessionConfig CapAtBudget(SessionConfig config) {
  config.entropy_budget.max_budget = config.budget;
  return config;
}

absl::StatusOr<SequenceResult> EvaluateSequence(
    const Model& model, absl::Span<const int> tokens, DeciderSession* session,
    const EvaluateOptions& options) {
  const ModelConfig& c = model.config();
  if (tokens.size() < 2 || tokens.size() > static_cast<size_t>(c.seq_len)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluate: ", tokens.size(), " tokens; need 2 to ", c.seq_len));
  }
  if (options.lag < 0) {
    return absl::InvalidArgumentError("evaluate: lag must be >= 0");
  }
  if (options.host_capacity < 0) {
    return absl::InvalidArgumentError("evaluate: host_capacity must be >= 0");
  }
  KvCache cache = model.NewCache(options.host_capacity);
  ForwardOutput out;
  SequenceResult result;
  // Answers not yet applied: evicted, demoted, promoted.
  struct Moves {
    std::vector<uint64_t> evicted, demoted, promoted;
  };
  std::deque<Moves> pending;
  if (options.record_evictions) {
    result.evicted_at.assign(tokens.size() - 1, kNeverEvicted);
  }
  for (size_t t = 0; t + 1 < tokens.size(); ++t) {
    const int position = static_cast<int>(t);
    absl::Status status = model.Forward(tokens[t], position, &cache, &out);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("position ", t, ": ", status.message()));
    }
    result.live_sum += cache.live_count();
    const double nll = NegativeLogLikelihood(out.logits, tokens[t + 1]);
    result.nll_sum += nll;
    if (options.keep_per_token_nll) result.nll.push_back(nll);
    if (session == nullptr) continue;

    DecisionRequest request;
    request.step = t + 1;
    request.slot = static_cast<uint64_t>(out.slot);
    request.keys = out.keys;
    request.queries = out.queries;
    request.entropy = Entropy(out.logits);
    Decision decision;
    status = session->Step(request, &decision);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("decider, position ", t,
                                                      ": ", status.message()));
    }
    if (decision.deferred) ++result.deferred;
    if (!std::isnan(decision.recall)) {
      ++result.recall_steps;
      result.recall_sum += decision.recall;
      result.log_recall_sum += std::log(decision.recall);
      result.oracle_recall_sum += decision.oracle_recall;
    }
    pending.push_back(Moves{std::move(decision.evicted),
                            std::move(decision.demoted),
                            std::move(decision.promoted)});
    if (pending.size() > static_cast<size_t>(options.lag)) {
      const Moves& moves = pending.front();
      for (uint64_t slot : moves.evicted) {
        if (options.record_evictions &&
            slot < static_cast<uint64_t>(cache.capacity())) {
          const int p = cache.position(static_cast<int>(slot));
          if (p >= 0) result.evicted_at[p] = position + 1;
        }
        status = cache.Evict(slot);
        if (!status.ok()) {
          return absl::Status(
              status.code(),
              absl::StrCat("position ", t,
                           ": freeing an answered slot: ", status.message()));
        }
        ++result.evicted;
      }
      // Evictions first, then demotions, then promotions: the device never
      // holds more than the live entries before the answer
      // (docs/step-semantics.md section 12, step 7).
      for (uint64_t slot : moves.demoted) {
        status = cache.Demote(slot);
        if (!status.ok()) {
          return absl::Status(
              status.code(),
              absl::StrCat("position ", t, ": demoting: ", status.message()));
        }
      }
      for (uint64_t slot : moves.promoted) {
        status = cache.Promote(slot);
        if (!status.ok()) {
          return absl::Status(
              status.code(),
              absl::StrCat("position ", t, ": promoting: ", status.message()));
        }
      }
      pending.pop_front();
    }
  }
  result.predicted = static_cast<int64_t>(tokens.size()) - 1;
  result.peak_live = cache.peak_live();
  result.demoted = cache.demotions();
  result.promoted = cache.promotions();
  result.bytes_moved = cache.bytes_moved();
  result.peak_host = cache.peak_demoted();
  return result;
}

absl::StatusOr<std::vector<std::string>> LoadStories(const std::string& path,
                                                     int max_stories) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("stories: cannot open '", path, "'"));
  }
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  std::vector<std::string> stories;
  for (absl::string_view part : absl::StrSplit(text, "<|endoftext|>")) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    if (max_stories > 0 && static_cast<int>(stories.size()) >= max_stories) {
      break;
    }
    stories.emplace_back(part);
  }
  if (stories.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stories: '", path, "' holds no story"));
  }
  return stories;
}

std::vector<int> StoryTokens(const Tokenizer& tokenizer,
                             const std::string& story, int max_tokens) {
  std::vector<int> ids = tokenizer.Encode(story, /*bos=*/true);
  if (static_cast<int>(ids.size()) > max_tokens) ids.resize(max_tokens);
  return ids;
}

std::string ResolveDataDir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("ENTROKV_DATA"); env != nullptr && *env) {
    return env;
  }
#ifdef ENTROKV_SOURCE_DIR
  const std::filesystem::path beside_repo =
      std::filesystem::path(ENTROKV_SOURCE_DIR) / ".." / "shared" / "data" /
      "tinystories";
  std::error_code error;
  if (std::filesystem::is_directory(beside_repo, error)) {
    return beside_repo.lexically_normal().string();
  }
#endif
  return "../shared/data/tinystories";
}

std::string ModelPath(const std::string& data_dir) {
  return (std::filesystem::path(data_dir) / "stories260K.bin").string();
}
std::string TokenizerPath(const std::string& data_dir) {
  return (std::filesystem::path(data_dir) / "tok512.bin").string();
}
std::string StoriesPath(const std::string& data_dir) {
  return (std::filesystem::path(data_dir) / "tinystories_valid_head.txt")
      .string();
}

}  // namespace entrokv::tinyllama
