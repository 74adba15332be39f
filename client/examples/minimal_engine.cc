// A minimal engine's integration with entrokv: one sequence, a KV cache of
// slots, and a decode loop that frees what the sidecar says to free.
// Usage: entrokv-minimal-engine [target] [steps]   (target: unix:/path or
// host:port)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "entrokv/client/client.h"

int main(int argc, char** argv) {
  entrokv::ClientOptions options;
  options.target = argc > 1 ? argv[1] : "unix:/run/entrokv/entrokv.sock";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 200;
  auto client = entrokv::Client::Connect(options);
  if (!client.ok())
    return std::fprintf(stderr, "%s\n", client.status().ToString().c_str()), 1;

  entrokv::SessionConfig config;  // The model's shape, in f32 on the wire.
  config.shape.layers = 2, config.shape.kv_heads = 2, config.shape.q_heads = 4;
  config.shape.head_dim = 16,
  config.shape.element_type = entrokv::ElementType::kF32;
  config.budget = 64;
  if (auto s = entrokv::ApplyPolicyName("entropy", &config); !s.ok()) return 1;
  // Fails only on the engine's own errors (a bad config): when the sidecar
  // is absent, silent or full, the session is offline and decides locally.
  auto session = (*client)->CreateSession(config);
  if (!session.ok())
    return std::fprintf(stderr, "%s\n", session.status().ToString().c_str()), 1;
  const bool offline = (*session)->degraded();
  const std::string why = (*session)->degraded_reason().ToString();

  std::vector<bool> cache(1024, false);  // The engine's KV slots: true = used.
  std::vector<float> key(config.shape.key_elements()),
      query(config.shape.query_elements());
  std::vector<float> logits(32);
  for (int t = 0; t < steps; ++t) {
    uint64_t slot = 0;  // The engine appends this step's key to a free slot.
    while (cache[slot]) ++slot;
    cache[slot] = true;
    for (size_t i = 0; i < key.size(); ++i)
      key[i] = ((t * 7 + i * 3) % 11) / 11.0f - 0.5f;
    for (size_t i = 0; i < query.size(); ++i)
      query[i] = ((t + i) % 5) / 5.0f - 0.4f;
    for (size_t i = 0; i < logits.size(); ++i)
      logits[i] = ((t * 13 + i) % 17) / 4.0f;
    entrokv::StepRequest step;
    step.slot_ids = {&slot, 1};
    step.keys = entrokv::VectorView::F32(key);
    step.queries = entrokv::VectorView::F32(query);
    step.logits = logits;  // The client computes the entropy.
    auto outcome = (*session)->Step(step);
    if (!outcome.ok())
      return std::fprintf(stderr, "%s\n", outcome.status().ToString().c_str()),
             1;
    for (uint64_t evicted : outcome->evicted) cache[evicted] = false;  // Free.
  }
  const entrokv::SessionCounters c = (*session)->counters();
  int used = 0;
  for (bool b : cache) used += b;
  std::printf("steps=%lld server=%lld fallback=%lld live=%d budget=%lld\n",
              static_cast<long long>(c.steps),
              static_cast<long long>(c.server_steps),
              static_cast<long long>(c.fallback_steps), used,
              static_cast<long long>(config.budget));
  if (offline) std::printf("offline: %s\n", why.c_str());
  return (*session)->Close().ok() ? 0 : 1;
}
