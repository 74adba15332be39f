#include "entrokv/client/live_set.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "entrokv/core/rule.h"

namespace entrokv {

absl::Status LiveSet::CheckAppend(absl::Span<const uint64_t> slot_ids,
                                  absl::Span<const uint8_t> pinned) const {
  if (!pinned.empty() && pinned.size() != slot_ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("append.pinned: ", pinned.size(), " flags for ",
                     slot_ids.size(), " slot ids"));
  }
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(slot_ids.size());
  for (const uint64_t id : slot_ids) {
    if (const int64_t index = IndexOf(id); index >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("append.slot_ids: slot ", id,
                       tier_.contains(index) ? " is in the demote tier"
                                             : " is already live"));
    }
    if (!seen.insert(id).second) {
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
    entries_.emplace_hint(
        entries_.end(), index,
        Entry{slot_ids[i], !pinned.empty() && pinned[i] != 0});
    index_of_[slot_ids[i]] = index;
  }
}

int64_t LiveSet::Remove(absl::Span<const uint64_t> slot_ids) {
  int64_t removed = 0;
  for (const uint64_t id : slot_ids) {
    auto it = index_of_.find(id);
    if (it == index_of_.end()) continue;
    entries_.erase(it->second);
    tier_.erase(it->second);
    index_of_.erase(it);
    ++removed;
  }
  return removed;
}

int64_t LiveSet::Demote(absl::Span<const uint64_t> slot_ids) {
  int64_t moved = 0;
  for (const uint64_t id : slot_ids) {
    auto it = entries_.find(IndexOf(id));
    if (it == entries_.end()) continue;
    tier_.insert(*it);
    entries_.erase(it);
    ++moved;
  }
  return moved;
}

int64_t LiveSet::Promote(absl::Span<const uint64_t> slot_ids) {
  int64_t moved = 0;
  for (const uint64_t id : slot_ids) {
    const int64_t index = IndexOf(id);
    if (index < 0) {
      Append({&id, 1}, {});
      ++moved;
      continue;
    }
    auto it = tier_.find(index);
    if (it == tier_.end()) continue;  // Live already.
    entries_.insert(*it);
    tier_.erase(it);
    ++moved;
  }
  return moved;
}

std::vector<uint64_t> LiveSet::TierSlots() const {
  std::vector<uint64_t> slots;
  slots.reserve(tier_.size());
  for (const auto& [index, entry] : tier_) slots.push_back(entry.slot_id);
  return slots;
}

std::vector<uint64_t> LiveSet::FailOpenEvictions(
    const StreamingRule& rule) const {
  std::vector<uint64_t> live = StreamingEvictions(rule);
  if (tier_.empty()) return live;
  // Both lists are in append order: merge them by append index.
  std::vector<uint64_t> out;
  out.reserve(live.size() + tier_.size());
  auto t = tier_.begin();
  for (const uint64_t id : live) {
    const int64_t index = index_of_.at(id);
    for (; t != tier_.end() && t->first < index; ++t) {
      out.push_back(t->second.slot_id);
    }
    out.push_back(id);
  }
  for (; t != tier_.end(); ++t) out.push_back(t->second.slot_id);
  return out;
}

std::vector<uint64_t> LiveSet::Slots() const {
  std::vector<uint64_t> slots;
  slots.reserve(entries_.size());
  for (const auto& [index, entry] : entries_) slots.push_back(entry.slot_id);
  return slots;
}

void LiveSet::Entries(std::vector<uint64_t>* slot_ids,
                      std::vector<uint8_t>* pinned) const {
  slot_ids->clear();
  pinned->clear();
  slot_ids->reserve(entries_.size());
  pinned->reserve(entries_.size());
  for (const auto& [index, entry] : entries_) {
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
  auto is_protected = [&](int64_t index, const Entry& entry) {
    return ::entrokv::rule::IsProtected(rule.sinks,
                                        std::max<int64_t>(rule.recent, 0),
                                        index, next_index_, entry.pinned);
  };
  if (rule.block_size <= 1) {
    // Oldest unprotected first: the map iterates in append order.
    for (const auto& [index, entry] : entries_) {
      if (need == 0) break;
      if (is_protected(index, entry)) continue;
      evicted.push_back(entry.slot_id);
      --need;
    }
    return evicted;
  }
  // Blocks: [b·N, (b+1)·N); a candidate is full, wholly live and unprotected.
  const int64_t n = rule.block_size;
  auto it = entries_.begin();
  while (it != entries_.end() && need > 0) {
    const int64_t block = it->first / n;
    const int64_t first = block * n;
    const int64_t end = first + n;
    bool candidate = it->first == first && end <= next_index_;
    std::vector<uint64_t> ids;
    int64_t expected = first;
    for (; it != entries_.end() && it->first < end; ++it) {
      candidate = candidate && it->first == expected &&
                  !is_protected(it->first, it->second);
      ++expected;
      ids.push_back(it->second.slot_id);
    }
    candidate = candidate && expected == end;
    if (!candidate) continue;
    evicted.insert(evicted.end(), ids.begin(), ids.end());
    need -= n;
  }
  return evicted;
}

}  // namespace entrokv
