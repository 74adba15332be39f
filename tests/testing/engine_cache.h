// The KV cache of a test engine, as a live_keys callback reads it: the keys
// each slot was appended with, by slot id.

#ifndef ENTROKV_TESTS_TESTING_ENGINE_CACHE_H_
#define ENTROKV_TESTS_TESTING_ENGINE_CACHE_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace entrokv::testing {

using EngineCache = std::map<uint64_t, std::vector<float>>;

// What SessionOptions::live_keys returns for `slots` from `cache`: their
// keys concatenated in the given order; NOT_FOUND naming a missing slot.
inline absl::Status GatherKeys(const EngineCache& cache,
                               absl::Span<const uint64_t> slots,
                               std::vector<float>* keys) {
  keys->clear();
  for (uint64_t slot : slots) {
    auto it = cache.find(slot);
    if (it == cache.end()) {
      return absl::NotFoundError(absl::StrCat("slot ", slot));
    }
    keys->insert(keys->end(), it->second.begin(), it->second.end());
  }
  return absl::OkStatus();
}

}  // namespace entrokv::testing

#endif  // ENTROKV_TESTS_TESTING_ENGINE_CACHE_H_
