// Writes the wire fuzzer's seed corpus (tests/fuzz/corpus/): one input per
// kind of session the tests drive — each ranking and budget control, each
// element type, GQA shapes, protection and pinned entries, blocks and block
// summaries, decision cadence, sketches, group-sum queries, logits instead of
// entropy, prefill chunks — and the bad steps of docs/step-semantics.md §1
// (wrong lengths, duplicate slots, NaN, step gaps and repeats, the last step
// number). Small shapes keep each input a few hundred bytes.
//
//   entrokv_fuzz_make_corpus OUT_DIR

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/v1/entrokv.pb.h"
#include "fuzz/fuzz_input.h"
#include "proto/convert/config_convert.h"

namespace entrokv::fuzz {
namespace {

// Builds one input: a session's CreateSessionRequest, then its messages.
class Seed {
 public:
  // A non-empty `session_id` gives the session the fuzz target's tight
  // limits (fuzz_step.cc).
  explicit Seed(const SessionConfig& config, uint32_t rng_seed = 1,
                const char* session_id = "")
      : config_(config), rng_(rng_seed) {
    v1::CreateSessionRequest request;
    proto::ToProto(config_, request.mutable_config());
    request.set_session_id(session_id);
    Create(request);
  }
  // A request written by hand (defaults left absent, a policy name, ...).
  Seed(const v1::CreateSessionRequest& request, const SessionConfig& config)
      : config_(config), rng_(1) {
    Create(request);
  }

  // A step of `appends` new entries with valid keys, queries and entropy.
  v1::SessionStep Step(int appends) {
    v1::SessionStep step;
    step.set_session_id("s");
    step.set_step(next_step_++);
    for (int i = 0; i < appends; ++i) {
      step.mutable_append()->add_slot_ids(next_slot_++);
    }
    step.mutable_append()->set_keys(
        Vectors(int64_t{appends} * config_.shape.key_elements()));
    step.set_queries(Vectors(config_.shape.query_elements()));
    step.set_entropy(std::uniform_real_distribution<double>(0.0, 3.0)(rng_));
    return step;
  }

  // Sends one message with `steps`.
  Seed& Send(const std::vector<v1::SessionStep>& steps) {
    v1::DecodeRequest request;
    if (!attached_) request.add_attach("s");
    attached_ = true;
    for (const v1::SessionStep& step : steps) *request.add_steps() = step;
    AppendChunk(request.SerializeAsString(), &bytes_);
    return *this;
  }
  // `count` messages of one decode step each.
  Seed& Decode(int count) {
    for (int i = 0; i < count; ++i) Send({Step(1)});
    return *this;
  }

  void Write(const std::string& dir, const std::string& name) const {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out << bytes_;
    std::printf("%s: %zu bytes\n", name.c_str(), bytes_.size());
  }

  uint64_t next_step() const { return next_step_; }
  void set_next_step(uint64_t step) { next_step_ = step; }

 private:
  void Create(const v1::CreateSessionRequest& request) {
    AppendChunk(request.SerializeAsString(), &bytes_);
  }

  std::string Vectors(int64_t elements) {
    std::vector<float> values(static_cast<size_t>(elements));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : values) v = normal(rng_);
    const ElementType type = config_.shape.element_type;
    std::string bytes(values.size() * ElementSize(type), '\0');
    if (!values.empty()) {
      EncodeElements(type, values.data(), values.size(),
                     reinterpret_cast<std::byte*>(bytes.data()));
    }
    return bytes;
  }

  SessionConfig config_;
  std::mt19937 rng_;
  std::string bytes_;
  bool attached_ = false;
  uint64_t next_step_ = 1;
  uint64_t next_slot_ = 100;
};

SessionConfig Small(const char* policy, ElementType type = ElementType::kF16) {
  SessionConfig config;
  config.shape.layers = 1;
  config.shape.kv_heads = 1;
  config.shape.q_heads = 2;
  config.shape.head_dim = 4;
  config.shape.element_type = type;
  config.budget = 4;
  config.placement = Placement::kCpu;
  if (!ApplyPolicyName(policy, &config).ok()) std::abort();
  return config;
}

void WritePolicies(const std::string& dir) {
  const char* policies[] = {"window",      "streaming",   "h2o",      "tova",
                            "keynorm",     "random",      "affinity", "entropy",
                            "h2o+entropy", "tova+entropy"};
  const ElementType types[] = {ElementType::kF16, ElementType::kF32,
                               ElementType::kBf16};
  int i = 0;
  for (const char* policy : policies) {
    SessionConfig config = Small(policy, types[i % 3]);
    Seed seed(config, i + 1);
    seed.Send({seed.Step(3)}).Decode(3);
    std::string name = std::string("policy-") + policy;
    for (char& c : name) c = c == '+' ? '-' : c;
    seed.Write(dir, name);
    ++i;
  }
}

void WriteShapes(const std::string& dir) {
  {  // GQA, two layers, protection and pinned entries, a prefill chunk.
    SessionConfig config = Small("h2o", ElementType::kF32);
    config.shape.layers = 2;
    config.shape.kv_heads = 2;
    config.shape.q_heads = 4;
    config.shape.head_dim = 4;
    config.budget = 5;
    config.protection.sinks = 1;
    config.protection.recent = 1;
    Seed seed(config);
    v1::SessionStep prefill = seed.Step(4);
    for (int p = 0; p < 4; ++p) prefill.mutable_append()->add_pinned(p == 2);
    seed.Send({prefill}).Decode(3);
    seed.Write(dir, "gqa-protection-pinned");
  }
  {  // Blocks, max reduce.
    SessionConfig config = Small("entropy");
    config.block_size = 2;
    config.block_reduce = BlockReduce::kMax;
    config.budget = 6;
    Seed seed(config);
    seed.Send({seed.Step(4)}).Decode(3);
    seed.Write(dir, "blocks-max");
  }
  {  // Block summaries.
    SessionConfig config = Small("tova");
    config.block_size = 2;
    config.block_summary = true;
    config.budget = 4;
    Seed seed(config);
    seed.Send({seed.Step(3)}).Decode(3);
    seed.Write(dir, "block-summary");
  }
  {  // Decision cadence with a hard ceiling; steps that decide nothing carry
     // no queries.
    SessionConfig config = Small("h2o+entropy");
    config.decide_every = 3;
    config.hard_ceiling = 6;
    Seed seed(config);
    seed.Send({seed.Step(2)});
    for (int i = 0; i < 6; ++i) {
      v1::SessionStep step = seed.Step(1);
      if ((i + 2) % 3 != 0) {  // Accepted steps 3 and 6 decide.
        step.clear_queries();
        step.clear_entropy();
      }
      seed.Send({step});
    }
    seed.Write(dir, "cadence-ceiling");
  }
  {  // A sketched session: project:2 of head_dim 4, two scored layers.
    SessionConfig config = Small("affinity+fixed");
    config.shape.layers = 2;
    config.shape.sketch_dim = 2;
    config.scored_layers = {3, 7};
    config.projection_seed = 5;
    Seed seed(config);
    seed.Send({seed.Step(2)}).Decode(3);
    seed.Write(dir, "sketch-project2");
  }
  {  // Group-sum queries (affinity reads the mean logit only).
    SessionConfig config = Small("entropy");
    config.shape.kv_heads = 2;
    config.shape.q_heads = 4;
    config.shape.query_form = QueryForm::kGroupSum;
    Seed seed(config);
    seed.Send({seed.Step(2)}).Decode(3);
    seed.Write(dir, "group-sum");
  }
  {  // Logits instead of entropy; several sessions' worth of steps in one
     // message (all go to the one session).
    SessionConfig config = Small("tova+entropy", ElementType::kBf16);
    Seed seed(config);
    std::vector<v1::SessionStep> steps;
    for (int i = 0; i < 4; ++i) {
      v1::SessionStep step = seed.Step(1);
      step.clear_entropy();
      for (int v = 0; v < 5; ++v) {
        step.mutable_logits()->add_values(0.5f * static_cast<float>(v - i));
      }
      steps.push_back(step);
    }
    seed.Send(steps).Decode(3);
    seed.Write(dir, "logits-batch");
  }
  {  // Most fields left to their defaults, the policy by name, GPU placement
     // with the CPU fallback.
    v1::CreateSessionRequest request;
    request.mutable_config()->set_policy("streaming");
    request.mutable_config()->set_streaming_sinks(1);
    request.mutable_config()->mutable_shape()->set_head_dim(4);
    request.mutable_config()->set_budget(2);
    request.mutable_config()->set_placement(v1::PLACEMENT_GPU);
    request.mutable_config()->set_placement_fallback(true);
    SessionConfig config;
    config.shape.head_dim = 4;
    config.budget = 2;
    if (!ApplyPolicyName("streaming", &config).ok()) std::abort();
    Seed seed(request, config);
    seed.Send({seed.Step(2)}).Decode(3);
    seed.Write(dir, "defaults-gpu-fallback");
  }
  // Extreme but valid configurations: creating them must stay cheap.
  {  // The largest sketched shape: 256 x 256 heads of head_dim 65536, r = 1.
    SessionConfig config = Small("affinity+fixed");
    config.shape.layers = 256;
    config.shape.kv_heads = 256;
    config.shape.q_heads = 256;
    config.shape.head_dim = 65536;
    config.shape.sketch_dim = 1;
    Seed seed(config);
    v1::SessionStep step;  // Its queries would not fit an input: none.
    step.set_session_id("s");
    step.set_step(1);
    step.set_entropy(1.0);
    seed.Send({step});
    seed.Write(dir, "huge-sketched-shape");
  }
  {  // Largest block size and cadence, an entropy budget up to 2^40.
    SessionConfig config = Small("entropy");
    config.budget = 4096;
    config.entropy_budget.max_budget = int64_t{1} << 40;
    config.block_size = 65536;
    config.decide_every = 65536;
    config.hard_ceiling = int64_t{1} << 40;
    config.protection.sinks = int64_t{1} << 40;
    config.protection.recent = int64_t{1} << 40;
    config.streaming_sinks = int64_t{1} << 40;
    Seed seed(config);
    seed.Send({seed.Step(2)}).Decode(2);
    seed.Write(dir, "huge-limits");
  }
}

// Bad steps (docs/step-semantics.md §1); each is followed by a good one.
void WriteBadSteps(const std::string& dir) {
  const SessionConfig config = Small("entropy");
  struct Bad {
    const char* name;
    std::function<void(v1::SessionStep*)> spoil;
  };
  const Bad bads[] = {
      {"short-keys",
       [](v1::SessionStep* s) {
         s->mutable_append()->mutable_keys()->pop_back();
       }},
      {"short-queries",
       [](v1::SessionStep* s) { s->mutable_queries()->resize(2); }},
      {"duplicate-slot",
       [](v1::SessionStep* s) {
         s->mutable_append()->add_slot_ids(s->append().slot_ids(0));
         const std::string keys = s->append().keys();
         s->mutable_append()->mutable_keys()->append(keys);
       }},
      {"nan-query",
       [](v1::SessionStep* s) {
         (*s->mutable_queries())[0] = '\xff';
         (*s->mutable_queries())[1] = '\x7f';
       }},
      {"missing-entropy", [](v1::SessionStep* s) { s->clear_entropy(); }},
      {"negative-entropy", [](v1::SessionStep* s) { s->set_entropy(-1.0); }},
      {"empty-logits",
       [](v1::SessionStep* s) { s->mutable_logits()->clear_values(); }},
      {"inf-logit",
       [](v1::SessionStep* s) {
         s->mutable_logits()->add_values(
             std::numeric_limits<float>::infinity());
       }},
      {"pinned-count",
       [](v1::SessionStep* s) {
         s->mutable_append()->add_pinned(true);
         s->mutable_append()->add_pinned(false);
         s->mutable_append()->add_pinned(true);
       }},
      {"step-repeat", [](v1::SessionStep* s) { s->set_step(s->step() - 1); }},
      {"step-gap", [](v1::SessionStep* s) { s->set_step(s->step() + 2); }},
  };
  for (const Bad& bad : bads) {
    Seed seed(config);
    seed.Send({seed.Step(2)});
    v1::SessionStep step = seed.Step(1);
    bad.spoil(&step);
    seed.Send({step});
    seed.set_next_step(seed.next_step() - 1);
    seed.Decode(3);
    seed.Write(dir, std::string("bad-") + bad.name);
  }
  {  // The last step numbers: 2^64-2 then 2^64-1, then nothing may follow.
    Seed seed(config);
    seed.set_next_step(std::numeric_limits<uint64_t>::max() - 1);
    seed.Decode(3);
    seed.Write(dir, "bad-last-step-numbers");
  }
  {  // 2^64-1 as a first step.
    Seed seed(config);
    seed.set_next_step(std::numeric_limits<uint64_t>::max());
    seed.Decode(2);
    seed.Write(dir, "bad-first-step-max");
  }
  {  // Tight limits: pinned entries past the live-entry limit (16).
    SessionConfig config = Small("window");
    Seed seed(config, 1, "tight");
    for (int i = 0; i < 3; ++i) {
      v1::SessionStep step = seed.Step(6);
      for (int p = 0; p < 6; ++p) step.mutable_append()->add_pinned(true);
      seed.Send({step});
    }
    seed.Write(dir, "tight-live-entries");
  }
  {  // Tight limits: keys past the byte limit (1 KiB).
    SessionConfig config = Small("keynorm");
    config.shape.layers = 2;
    config.shape.head_dim = 32;
    config.budget = 16;
    Seed seed(config, 1, "tight");
    seed.Send({seed.Step(4)}).Send({seed.Step(4)}).Send({seed.Step(4)});
    seed.Write(dir, "tight-bytes");
  }
  {  // More live entries than the budget allows at once, all pinned.
    Seed seed(config);
    v1::SessionStep step = seed.Step(6);
    for (int p = 0; p < 6; ++p) step.mutable_append()->add_pinned(true);
    seed.Send({step}).Decode(3);
    seed.Write(dir, "all-pinned");
  }
}

}  // namespace
}  // namespace entrokv::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  entrokv::fuzz::WritePolicies(argv[1]);
  entrokv::fuzz::WriteShapes(argv[1]);
  entrokv::fuzz::WriteBadSteps(argv[1]);
  return 0;
}
