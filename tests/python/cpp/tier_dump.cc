// Runs a CPU session with a demote tier over steps read from stdin and prints
// each step's moves, for tests/python/test_tier.py to compare with its numpy
// model of docs/step-semantics.md section 12.
//
// Usage: tier_dump RANKING BUDGET CAPACITY MARGIN MAX_PROMOTIONS SINKS RECENT
//   HEAD_DIM SEED
// One layer, one kv head, one q head, f32, fixed budget. Reads steps until
// EOF, each: N, then N pairs "slot pinned", then N·HEAD_DIM key floats, then
// HEAD_DIM query floats, floats as hex bit patterns.
// Prints one line a step: "live L demoted K ids... promoted K ids...
// evicted K ids...", each list in the session's (append) order; on an error,
// "error MESSAGE" and exit 1.
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"

namespace {

bool ReadFloat(float* out) {
  uint32_t bits;
  if (std::scanf("%" SCNx32, &bits) != 1) return false;
  std::memcpy(out, &bits, sizeof(bits));
  return true;
}

void PrintList(const char* name, const std::vector<uint64_t>& ids) {
  std::printf(" %s %zu", name, ids.size());
  for (uint64_t id : ids) std::printf(" %" PRIu64, id);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 10) return 2;
  entrokv::SessionConfig config;
  if (!entrokv::ParseRanking(argv[1], &config.ranking)) return 2;
  config.budget_control = entrokv::BudgetControl::kFixed;
  config.budget = std::atoll(argv[2]);
  config.tier.capacity = std::atoll(argv[3]);
  config.tier.promote_margin = std::strtod(argv[4], nullptr);
  config.tier.max_promotions = std::atoll(argv[5]);
  config.protection.sinks = std::atoll(argv[6]);
  config.protection.recent = std::atoll(argv[7]);
  config.shape.layers = 1;
  config.shape.kv_heads = 1;
  config.shape.q_heads = 1;
  config.shape.head_dim = std::atoi(argv[8]);
  config.shape.element_type = entrokv::ElementType::kF32;
  config.seed = std::strtoull(argv[9], nullptr, 10);
  auto backend = entrokv::CreateBackend(entrokv::BackendKind::kCpu);
  auto session = (*backend)->CreateSession(config, {});
  if (!session.ok()) {
    std::printf("error %s\n", std::string(session.status().message()).c_str());
    return 1;
  }
  const int d = config.shape.head_dim;
  uint64_t step = 1;
  int n;
  while (std::scanf("%d", &n) == 1) {
    std::vector<uint64_t> slots(n);
    std::vector<uint8_t> pinned(n);
    for (int e = 0; e < n; ++e) {
      unsigned flag;
      if (std::scanf("%" SCNu64 " %u", &slots[e], &flag) != 2) return 2;
      pinned[e] = flag != 0 ? 1 : 0;
    }
    std::vector<float> keys(static_cast<size_t>(n) * d), query(d);
    for (float& v : keys) {
      if (!ReadFloat(&v)) return 2;
    }
    for (float& v : query) {
      if (!ReadFloat(&v)) return 2;
    }
    entrokv::StepInput input;
    input.step = step++;
    input.append.slot_ids = slots;
    input.append.pinned = pinned;
    input.append.keys = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(keys.data()),
        keys.size() * sizeof(float));
    input.queries = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(query.data()),
        query.size() * sizeof(float));
    entrokv::StepResult result;
    if (absl::Status st = (*session)->Step(input, &result); !st.ok()) {
      std::printf("error %s\n", std::string(st.message()).c_str());
      return 1;
    }
    std::printf("live %" PRId64, result.live);
    PrintList("demoted", result.demoted);
    PrintList("promoted", result.promoted);
    PrintList("evicted", result.evicted);
    std::printf("\n");
  }
  return 0;
}
