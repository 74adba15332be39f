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
// A demote tier (docs/step-semantics.md section 12). The set also records the
// session's demoted entries, apart from the live ones: Demote() moves live
// entries to the tier and Promote() moves them back, each keeping its append
// index and pinned flag, so that a promoted entry returns to its original
// place in append order (the server numbers it so: a demoted entry keeps its
// append index and its place among the sinks and the recent window). size(),
// Slots(), Entries() and StreamingEvictions() see the live entries only;
// TierSlots() the demoted ones. CheckAppend() refuses an id that is live or
// demoted, as the server does. FailOpenEvictions() is the local decision of
// a session with a tier: the streaming evictions of its live entries plus
// every demoted entry (no one scores them any more; session.h, "Demote
// tier").
//
// Thread-safety: none; a LiveSet belongs to one Session, used by one thread.

#ifndef ENTROKV_CLIENT_LIVE_SET_H_
#define ENTROKV_CLIENT_LIVE_SET_H_

#include <cstdint>
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

  // OK when every id is neither live nor demoted and unique within
  // `slot_ids`, and
  // `pinned` is empty or as long as `slot_ids`; else InvalidArgument naming
  // "append.slot_ids" or "append.pinned". Changes nothing.
  absl::Status CheckAppend(absl::Span<const uint64_t> slot_ids,
                           absl::Span<const uint8_t> pinned) const;

  // Records new entries in order.
  // REQUIRES: CheckAppend(slot_ids, pinned).ok().
  void Append(absl::Span<const uint64_t> slot_ids,
              absl::Span<const uint8_t> pinned);

  // Removes the given ids, live or demoted; other ids are ignored. Returns
  // how many were held.
  int64_t Remove(absl::Span<const uint64_t> slot_ids);

  // Moves the given live ids to the tier; ids that are not live are ignored.
  // Returns how many moved.
  int64_t Demote(absl::Span<const uint64_t> slot_ids);
  // Moves the given demoted ids back to the live set, each at its own append
  // index. An id the set does not hold at all (a session attached with its
  // live entries only, whose server session had demoted entries) becomes the
  // newest live entry, unpinned, so that the local rule still counts and
  // evicts it. Live ids are ignored. Returns how many became live.
  int64_t Promote(absl::Span<const uint64_t> slot_ids);

  // The local streaming decision for the current live set: the ids to evict,
  // in append order. Does not remove them (call Remove()).
  std::vector<uint64_t> StreamingEvictions(const StreamingRule& rule) const;
  // StreamingEvictions(rule) and every demoted id, together in append order.
  // Does not remove them (call Remove()).
  std::vector<uint64_t> FailOpenEvictions(const StreamingRule& rule) const;

  // True when `slot_id` is live (not demoted).
  bool Contains(uint64_t slot_id) const { return StateOf(slot_id) == kLive; }
  bool Demoted(uint64_t slot_id) const { return StateOf(slot_id) == kDemoted; }
  int64_t size() const { return live_; }
  int64_t tier_size() const { return demoted_; }
  // Demoted ids in append order.
  std::vector<uint64_t> TierSlots() const;
  int64_t next_index() const { return next_index_; }
  // Live ids in append order.
  std::vector<uint64_t> Slots() const;
  // Live ids and their pinned flags (1: pinned), in append order.
  void Entries(std::vector<uint64_t>* slot_ids,
               std::vector<uint8_t>* pinned) const;

 private:
  enum State : uint8_t { kGone, kLive, kDemoted };
  struct Entry {
    int64_t index;  // Append index.
    uint64_t slot_id;
    bool pinned;
    State state;
  };
  // The position in entries_ of the held id `slot_id`, or -1.
  int64_t PositionOf(uint64_t slot_id) const;
  State StateOf(uint64_t slot_id) const {
    const int64_t at = PositionOf(slot_id);
    return at < 0 ? kGone : entries_[at].state;
  }
  // Drops the removed entries from entries_ once they are the majority.
  void CompactIfSparse();

  // Every entry appended and not yet dropped, in append order (ascending
  // append index): live, demoted, or removed (kGone) until CompactIfSparse
  // drops it. One vector instead of a node per entry: appends go at the end,
  // and a promoted entry returns to its place by changing its state.
  std::vector<Entry> entries_;
  int64_t live_ = 0;
  int64_t demoted_ = 0;  // The rest of entries_ is removed (kGone).
  absl::flat_hash_map<uint64_t, int64_t> index_of_;  // Live and demoted.
  int64_t next_index_ = 0;
};

}  // namespace entrokv

#endif  // ENTROKV_CLIENT_LIVE_SET_H_
