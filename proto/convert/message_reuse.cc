#include "proto/convert/message_reuse.h"

#include <cstdint>
#include <string>
#include <vector>

namespace entrokv::proto_convert {
namespace {

// True when a field's storage holds more than twice what the field last
// carried, and a little more. Such storage is freed rather than kept: what
// a prefill chunk grew would otherwise stay with its step through the
// decode steps after it, taking the budget that other steps' fields need.
bool Oversized(size_t capacity, size_t used) {
  constexpr size_t kSmall = 64;  // Bytes: protobuf's and std::string's least.
  return capacity > 2 * used + kSmall;
}

// Empties `step` as Clear() would, but keeps its Append (emptied), and the
// capacity of the fields that carry vectors, while no field is oversized
// for what it carried and all fits in `*budget` (which it lowers by what it
// keeps).
void ClearKeepingAppend(v1::SessionStep* step, size_t* budget) {
  const auto keep = [budget](size_t bytes) {
    if (bytes > *budget) return false;
    *budget -= bytes;
    return true;
  };
  v1::Append* append = step->has_append() ? step->release_append() : nullptr;
  const bool big_queries =
      Oversized(step->queries().capacity(), step->queries().size());
  step->Clear();
  if (big_queries || !keep(step->queries().capacity())) {
    std::string().swap(*step->mutable_queries());
  }
  if (append == nullptr) return;
  const bool big_keys =
      Oversized(append->keys().capacity(), append->keys().size());
  const bool big_slots =
      Oversized(append->slot_ids().Capacity() * sizeof(uint64_t),
                append->slot_ids_size() * sizeof(uint64_t));
  const bool big_pinned =
      Oversized(static_cast<size_t>(append->pinned().Capacity()),
                static_cast<size_t>(append->pinned_size()));
  append->Clear();
  if (big_keys) std::string().swap(*append->mutable_keys());
  if (big_slots) {
    google::protobuf::RepeatedField<uint64_t>().Swap(
        append->mutable_slot_ids());
  }
  if (big_pinned)
    google::protobuf::RepeatedField<bool>().Swap(append->mutable_pinned());
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
