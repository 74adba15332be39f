#include "proto/convert/message_reuse.h"

#include <cstdint>
#include <string>
#include <vector>

namespace entrokv::proto_convert {
namespace {

// Empties `step` as Clear() would, but keeps its Append (emptied), and the
// capacity of the fields that carry vectors, while their capacity fits in
// `*budget` (which it lowers by what it keeps).
void ClearKeepingAppend(v1::SessionStep* step, size_t* budget) {
  const auto keep = [budget](size_t bytes) {
    if (bytes > *budget) return false;
    *budget -= bytes;
    return true;
  };
  v1::Append* append = step->has_append() ? step->release_append() : nullptr;
  step->Clear();
  if (!keep(step->queries().capacity())) {
    std::string().swap(*step->mutable_queries());
  }
  if (append == nullptr) return;
  append->Clear();
  if (!keep(append->keys().capacity() +
            append->slot_ids().Capacity() * sizeof(uint64_t) +
            static_cast<size_t>(append->pinned().Capacity()))) {
    delete append;
    return;
  }
  step->set_allocated_append(append);
}

}  // namespace

void ClearForReuse(size_t budget, v1::DecodeRequest* request) {
  auto* steps = request->mutable_steps();
  thread_local std::vector<v1::SessionStep*> held;  // Reused: no allocation.
  held.clear();
  while (!steps->empty()) held.push_back(steps->ReleaseLast());
  while (steps->ClearedCount() > 0) held.push_back(steps->ReleaseCleared());
  for (v1::SessionStep* step : held) {
    ClearKeepingAppend(step, &budget);
    steps->AddCleared(step);  // The next add_steps() or parse takes it.
  }
  // The rest of the message (Clear() leaves the cleared steps alone).
  request->Clear();
}

}  // namespace entrokv::proto_convert
