#include "entrokv/client/live_set.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "entrokv/core/rule.h"

namespace entrokv {

int64_t LiveSet::PositionOf(uint64_t slot_id) const {
  auto it = index_of_.find(slot_id);
  if (it == index_of_.end()) return -1;
  // entries_ is in ascending append index, and holds every held index.
  auto at = std::lower_bound(
      entries_.begin(), entries_.end(), it->second,
      [](const Entry& entry, int64_t index) { return entry.index < index; });
  return at - entries_.begin();
}

void LiveSet::CompactIfSparse() {
  const int64_t size = static_cast<int64_t>(entries_.size());
  const int64_t gone = size - live_ - demoted_;
  if (gone < 64 || gone * 2 < size) return;
  std::erase_if(entries_,
                [](const Entry& entry) { return entry.state == kGone; });
}

absl::Status LiveSet::CheckAppend(absl::Span<const uint64_t> slot_ids,
                                  absl::Span<const uint8_t> pinned) const {
  if (!pinned.empty() && pinned.size() != slot_ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("append.pinned: ", pinned.size(), " flags for ",
                     slot_ids.size(), " slot ids"));
  }
  // A decode step appends one entry: no set for the duplicates then.
  absl::flat_hash_set<uint64_t> seen;
  if (slot_ids.size() > 1) seen.reserve(slot_ids.size());
  for (const uint64_t id : slot_ids) {
    if (const State state = StateOf(id); state != kGone) {
      return absl::InvalidArgumentError(absl::StrCat(
          "append.slot_ids: slot ", id,
          state == kDemoted ? " is in the demote tier" : " is already live"));
    }
    if (slot_ids.size() > 1 && !seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("append.slot_ids: slot ", id, " appears twice"));
    }
  }
  return absl::OkStatus();
}

void LiveSet::Append(absl::Span<const uint64_t> slot_ids,
                     absl::Span<const uint8_t> pinned) {
  for (size_t i = 0; i < slot_ids.size(); ++i) {
    const int64_t index = next_index_++;
    entries_.push_back(
        Entry{index, slot_ids[i], !pinned.empty() && pinned[i] != 0, kLive});
    index_of_[slot_ids[i]] = index;
    ++live_;
  }
}

int64_t LiveSet::Remove(absl::Span<const uint64_t> slot_ids) {
  int64_t removed = 0;
  for (const uint64_t id : slot_ids) {
    const int64_t at = PositionOf(id);
    if (at < 0) continue;
    Entry& entry = entries_[at];
    --(entry.state == kLive ? live_ : demoted_);
    entry.state = kGone;
    index_of_.erase(id);
    ++removed;
  }
  CompactIfSparse();
  return removed;
}

int64_t LiveSet::Demote(absl::Span<const uint64_t> slot_ids) {
  int64_t moved = 0;
  for (const uint64_t id : slot_ids) {
    const int64_t at = PositionOf(id);
    if (at < 0 || entries_[at].state != kLive) continue;
    entries_[at].state = kDemoted;
    --live_;
    ++demoted_;
    ++moved;
  }
  return moved;
}

int64_t LiveSet::Promote(absl::Span<const uint64_t> slot_ids) {
  int64_t moved = 0;
  for (const uint64_t id : slot_ids) {
    const int64_t at = PositionOf(id);
    if (at < 0) {
      Append({&id, 1}, {});
      ++moved;
      continue;
    }
    if (entries_[at].state != kDemoted) continue;  // Live already.
    entries_[at].state = kLive;
    --demoted_;
    ++live_;
    ++moved;
  }
  return moved;
}

std::vector<uint64_t> LiveSet::TierSlots() const {
  std::vector<uint64_t> slots;
  slots.reserve(demoted_);
  for (const Entry& entry : entries_) {
    if (entry.state == kDemoted) slots.push_back(entry.slot_id);
  }
  return slots;
}

std::vector<uint64_t> LiveSet::FailOpenEvictions(
    const StreamingRule& rule) const {
  std::vector<uint64_t> live = StreamingEvictions(rule);
  if (demoted_ == 0) return live;
  // The live evictions are live entries in append order: walk entries_ once,
  // taking every demoted entry and each live eviction in its place.
  std::vector<uint64_t> out;
  out.reserve(live.size() + demoted_);
  size_t next = 0;
  for (const Entry& entry : entries_) {
    if (entry.state == kDemoted) {
      out.push_back(entry.slot_id);
    } else if (entry.state == kLive && next < live.size() &&
               live[next] == entry.slot_id) {
      out.push_back(entry.slot_id);
      ++next;
    }
  }
  return out;
}

std::vector<uint64_t> LiveSet::Slots() const {
  std::vector<uint64_t> slots;
  slots.reserve(live_);
  for (const Entry& entry : entries_) {
    if (entry.state == kLive) slots.push_back(entry.slot_id);
  }
  return slots;
}

void LiveSet::Entries(std::vector<uint64_t>* slot_ids,
                      std::vector<uint8_t>* pinned) const {
  slot_ids->clear();
  pinned->clear();
  slot_ids->reserve(live_);
  pinned->reserve(live_);
  for (const Entry& entry : entries_) {
    if (entry.state != kLive) continue;
    slot_ids->push_back(entry.slot_id);
    pinned->push_back(entry.pinned ? 1 : 0);
  }
}

std::vector<uint64_t> LiveSet::StreamingEvictions(
    const StreamingRule& rule) const {
  std::vector<uint64_t> evicted;
  const int64_t budget = std::max<int64_t>(rule.budget, 1);
  int64_t need = size() - budget;
  if (need <= 0) return evicted;
  // Core's protection rule (sections 7 and 8 of docs/step-semantics.md).
  auto is_protected = [&](const Entry& entry) {
    return ::entrokv::rule::IsProtected(rule.sinks,
                                        std::max<int64_t>(rule.recent, 0),
                                        entry.index, next_index_, entry.pinned);
  };
  if (rule.block_size <= 1) {
    // Oldest unprotected first: entries_ is in append order.
    for (const Entry& entry : entries_) {
      if (need == 0) break;
      if (entry.state != kLive || is_protected(entry)) continue;
      evicted.push_back(entry.slot_id);
      --need;
    }
    return evicted;
  }
  // Blocks: [b·N, (b+1)·N); a candidate is full, wholly live and unprotected.
  const int64_t n = rule.block_size;
  // The live entries' positions, in append order.
  auto next_live = [&](size_t at) {
    while (at < entries_.size() && entries_[at].state != kLive) ++at;
    return at;
  };
  size_t at = next_live(0);
  std::vector<uint64_t> ids;
  while (at < entries_.size() && need > 0) {
    const int64_t first = entries_[at].index / n * n;
    const int64_t end = first + n;
    bool candidate = entries_[at].index == first && end <= next_index_;
    ids.clear();
    int64_t expected = first;
    for (; at < entries_.size() && entries_[at].index < end;
         at = next_live(at + 1)) {
      candidate = candidate && entries_[at].index == expected &&
                  !is_protected(entries_[at]);
      ++expected;
      ids.push_back(entries_[at].slot_id);
    }
    candidate = candidate && expected == end;
    if (!candidate) continue;
    evicted.insert(evicted.end(), ids.begin(), ids.end());
    need -= n;
  }
  return evicted;
}

}  // namespace entrokv
