// The cases of entrokv-bench-core that are registered at run time, after the
// Llama-3-8B rows (bench_core.cc): what shadow policies add to a step, and
// what a demote tier adds to a decision.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench_core.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "entrokv/core/shadow.h"

namespace entrokv::bench {
namespace {

// ---------------------------------------------------------------------------
// Shadow policies (issue #20 item 5): what a ShadowSet adds to each step of
// the session it watches, as the server runs it after each reply.

constexpr int64_t kShadowLive = 4 << 10;

struct ShadowCase {
  const char* name;
  bool watched;  // false: no ShadowSet at all.
  int shadows;   // The first this many of the shape's shadow policies.
  int32_t score_every;
};
constexpr ShadowCase kShadowCases[] = {
    {"none", false, 0, 1}, {"recall", true, 0, 1}, {"1", true, 1, 1},
    {"2", true, 2, 1},     {"4", true, 4, 1},      {"4/every16", true, 4, 16},
};

// A shape of the shadow rows, and the policies its shadows run, at the
// session's budget: the attention rankings need per-head queries, so the
// group-sum shape shadows the others.
struct ShadowShape {
  const char* name;
  SessionConfig config;
  std::vector<const char*> policies;
};

void RunShadowSteps(benchmark::State& state, const ShadowShape& shape,
                    const ShadowCase& c) {
  const SessionConfig& config = shape.config;
  const char* shape_name = shape.name;
  ShadowOptions options;
  options.score_every = c.score_every;
  // Every entry the bench appends (prefill, warm-up and timed steps) stays
  // in the reference, so that every timed step is scored: at the default
  // shape that is more than the server's default 64 MiB would hold.
  options.max_reference_entries = 2 * kShadowLive;
  for (int i = 0; i < c.shadows; ++i) {
    SessionConfig shadow = config;
    if (absl::Status st = ApplyPolicyName(shape.policies[i], &shadow);
        !st.ok()) {
      Die("ApplyPolicyName", st);
    }
    options.policies.push_back(shadow);
  }
  SteadySession& session =
      CachedSession(std::string("shadows/") + shape_name + "/" + c.name, config,
                    c.watched ? &options : nullptr);
  if (!session.RunPeriod()) {  // Warm-up, untimed.
    state.SkipWithError("live count drifted");
    return;
  }
  for (auto _ : state) {
    if (!session.RunPeriod()) {
      state.SkipWithError("live count drifted");
      break;
    }
  }
  state.counters["shadow_policies"] = c.shadows;
  state.counters["shadow_watched"] = c.watched ? 1 : 0;
  state.counters["score_every"] = c.score_every;
  if (const ShadowSet* set = session.shadows(); set != nullptr) {
    const ShadowStats stats = set->Stats();
    state.counters["reference_entries"] = double(stats.reference_entries);
    state.counters["reference_full"] = stats.reference_full ? 1 : 0;
    state.counters["shadow_bytes"] = double(set->bytes_held());
  }
}

}  // namespace

void RegisterShadowBenchmarks() {
  const SessionConfig standard = DefaultShapeConfig("entropy", kShadowLive);
  static const auto* shapes = new std::vector<ShadowShape>{
      {"default", standard, {"h2o", "tova", "window", "streaming"}},
      {"8B-project:16+gsum",
       ModelConfig(kModelVariants[1], kShadowLive, 1),
       {"affinity", "keynorm", "window", "streaming"}},
  };
  for (const ShadowShape& shape : *shapes) {
    for (const ShadowCase& c : kShadowCases) {
      const std::string name =
          std::string("BM_Shadows/") + shape.name + "/" + c.name;
      benchmark::RegisterBenchmark(name.c_str(),
                                   [&shape, &c](benchmark::State& state) {
                                     RunShadowSteps(state, shape, c);
                                   })
          // A fixed count: the reference grows by one entry a step, so the
          // timed steps score about 4,100 to 4,160 entries.
          ->Iterations(64)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

namespace {

// ---------------------------------------------------------------------------
// Demote tier (issue #24 item 5): what a tier of D = B entries adds to a
// decision, which scores the B + D held entries and picks the moves.

struct TierCase {
  const char* shape;  // "default", or the 8B sketched shape.
  const char* policy;
  int64_t live;
};
constexpr TierCase kTierCases[] = {
    {"default", "tova", 8 << 10},
    {"default", "entropy", 8 << 10},
    {"8B-project:16+gsum", "entropy", 4 << 10},
};

SessionConfig TierConfig(const TierCase& c, bool tier) {
  SessionConfig config;
  if (std::string(c.shape) == "default") {
    config.shape = BenchShape();
    config.budget = c.live;
  } else {
    config = ModelConfig(kModelVariants[1], c.live, 1);
  }
  if (absl::Status st = ApplyPolicyName(c.policy, &config); !st.ok()) {
    Die("ApplyPolicyName", st);
  }
  if (tier) config.tier.capacity = c.live;  // D = B; m 0, P 8: the defaults.
  return config;
}

void RunTierSteps(benchmark::State& state, const std::string& name,
                  const SessionConfig& config) {
  SteadySession& session = CachedSession(name, config);
  if (!session.RunPeriod()) {  // Warm-up, untimed.
    state.SkipWithError("live count drifted");
    return;
  }
  const SessionStats before = session.Stats();
  for (auto _ : state) {
    if (!session.RunPeriod()) {
      state.SkipWithError("live count drifted");
      break;
    }
  }
  const SessionStats after = session.Stats();
  const double steps = double(state.iterations()) * session.period();
  state.counters["tier_capacity"] = double(config.tier.capacity);
  state.counters["tier_held"] = double(after.tier_held);
  state.counters["demoted_per_step"] =
      steps > 0 ? double(after.demoted - before.demoted) / steps : 0.0;
  state.counters["promoted_per_step"] =
      steps > 0 ? double(after.promoted - before.promoted) / steps : 0.0;
  state.counters["evicted_per_step"] =
      steps > 0 ? double(after.evicted - before.evicted) / steps : 0.0;
}

}  // namespace

void RegisterTierBenchmarks() {
  for (const TierCase& c : kTierCases) {
    for (bool tier : {false, true}) {
      const std::string name = std::string("BM_Tier/") + c.shape + "/" +
                               c.policy + "/" + std::to_string(c.live) + "/" +
                               (tier ? "D=B" : "none");
      const SessionConfig config = TierConfig(c, tier);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [name, config](benchmark::State& state) {
                                     RunTierSteps(state, name, config);
                                   })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace entrokv::bench
