// LiveSet: the client's own record of a session's live entries, and the local
// `streaming` decision a Session falls back to when the sidecar cannot answer.
//
// Every entry the engine appends gets the next append index (0, 1, 2, ...),
// exactly as the server numbers them. The server's evictions are removed with
// Remove(); when the server cannot answer in time, StreamingEvictions() decides
// locally in the spirit of docs/design.md's `streaming` ranking: it keeps the first
// `sinks` entries ever appended, every pinned entry and the `recent` newest,
// and evicts the oldest of the rest until at most `budget` entries live. With
// `block_size` N > 1 only whole, full blocks of N append indices are evicted
// (a block with a protected or already evicted token is never a candidate).
// The live count can stay above the budget only when protected entries alone
// exceed it.
//
// Thread-safety: none; a LiveSet belongs to one Session, used by one thread.

#ifndef ENTROKV_CLIENT_LIVE_SET_H_
#define ENTROKV_CLIENT_LIVE_SET_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace entrokv {

struct StreamingRule {
  int64_t budget = 1;      // Live entries allowed (tokens); >= 1.
  int64_t sinks = 0;       // The first `sinks` appended entries are kept.
  int64_t recent = 0;      // The `recent` newest appended entries are kept.
  int32_t block_size = 1;  // 1: tokens; N > 1: whole blocks of N tokens.
};

class LiveSet {
 public:
  LiveSet() = default;

  // OK when every id is new to the live set and unique within `slot_ids`, and
  // `pinned` is empty or as long as `slot_ids`; else InvalidArgument naming
  // "append.slot_ids" or "append.pinned". Changes nothing.
  absl::Status CheckAppend(absl::Span<const uint64_t> slot_ids,
                           absl::Span<const uint8_t> pinned) const;

  // Records new entries in order.
  // REQUIRES: CheckAppend(slot_ids, pinned).ok().
  void Append(absl::Span<const uint64_t> slot_ids,
              absl::Span<const uint8_t> pinned);

  // Removes the given ids; ids that are not live are ignored. Returns how many
  // were live.
  int64_t Remove(absl::Span<const uint64_t> slot_ids);

  // The local streaming decision for the current live set: the ids to evict,
  // in append order. Does not remove them (call Remove()).
  std::vector<uint64_t> StreamingEvictions(const StreamingRule& rule) const;

  bool Contains(uint64_t slot_id) const { return index_of_.contains(slot_id); }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  int64_t next_index() const { return next_index_; }
  // Live ids in append order.
  std::vector<uint64_t> Slots() const;
  // Live ids and their pinned flags (1: pinned), in append order.
  void Entries(std::vector<uint64_t>* slot_ids,
               std::vector<uint8_t>* pinned) const;

 private:
  struct Entry {
    uint64_t slot_id;
    bool pinned;
  };
  std::map<int64_t, Entry> entries_;  // By append index.
  absl::flat_hash_map<uint64_t, int64_t> index_of_;
  int64_t next_index_ = 0;
};

}  // namespace entrokv

#endif  // ENTROKV_CLIENT_LIVE_SET_H_
