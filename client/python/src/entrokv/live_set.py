"""The client's record of a session's live entries and the local `streaming`
decision it falls back to (the rule of client/src/live_set.cc, exactly).

With a demote tier (docs/step-semantics.md section 12) it also records the
demoted entries apart from the live ones: demote() and promote() move an
entry between them keeping its append index and pinned flag, so a promoted
entry returns to its original place in append order. len(), slots(),
entries() and streaming_evictions() see live entries only; tier_slots() the
demoted ones; fail_open_evictions() adds every demoted entry to the
streaming evictions (see Session, "Demote tier")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from .errors import invalid


@dataclass
class StreamingRule:
    budget: int = 1  # Live entries allowed (tokens); >= 1.
    sinks: int = 0  # The first `sinks` appended entries are kept.
    recent: int = 0  # The `recent` newest appended entries are kept.
    block_size: int = 1  # 1: tokens; N > 1: whole blocks of N tokens.


class LiveSet:
    """Live entries by append index (0, 1, 2, ... as the server numbers them)."""

    def __init__(self) -> None:
        # Live: index -> (slot_id, pinned). Python dicts keep insertion order,
        # kept equal to append order (promote() re-sorts after inserting).
        self._entries: Dict[int, tuple] = {}
        self._tier: Dict[int, tuple] = {}  # Demoted, likewise.
        self._index_of: Dict[int, int] = {}  # Live and demoted.
        self.next_index = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, slot_id: int) -> bool:
        """True when `slot_id` is live (not demoted)."""
        return self._index_of.get(slot_id, -1) in self._entries

    def demoted(self, slot_id: int) -> bool:
        return self._index_of.get(slot_id, -1) in self._tier

    def tier_size(self) -> int:
        return len(self._tier)

    def check_append(self, slot_ids: Sequence[int], pinned: Sequence[bool]) -> None:
        """Raises INVALID_ARGUMENT naming append.pinned / append.slot_ids."""
        if len(pinned) and len(pinned) != len(slot_ids):
            raise invalid(f"append.pinned: {len(pinned)} flags for "
                          f"{len(slot_ids)} slot ids")
        seen = set()
        for sid in slot_ids:
            if sid in self._index_of:
                where = ("is in the demote tier" if self._index_of[sid] in self._tier
                         else "is already live")
                raise invalid(f"append.slot_ids: slot {sid} {where}")
            if sid in seen:
                raise invalid(f"append.slot_ids: slot {sid} appears twice")
            seen.add(sid)

    def append(self, slot_ids: Sequence[int], pinned: Sequence[bool]) -> None:
        for i, sid in enumerate(slot_ids):
            index = self.next_index
            self.next_index += 1
            self._entries[index] = (sid, bool(pinned[i]) if len(pinned) else False)
            self._index_of[sid] = index

    def remove(self, slot_ids: Sequence[int]) -> int:
        removed = 0
        for sid in slot_ids:
            index = self._index_of.pop(sid, None)
            if index is None:
                continue
            self._entries.pop(index, None)
            self._tier.pop(index, None)
            removed += 1
        return removed

    def demote(self, slot_ids: Sequence[int]) -> int:
        """Moves live ids to the tier (others are ignored); how many moved."""
        moved = 0
        for sid in slot_ids:
            index = self._index_of.get(sid, -1)
            if index in self._entries:
                self._tier[index] = self._entries.pop(index)
                moved += 1
        return moved

    def promote(self, slot_ids: Sequence[int]) -> int:
        """Moves demoted ids back to the live set at their own append index.
        An id not held at all (a session attached with its live entries only)
        becomes the newest live entry; live ids are ignored. How many became
        live."""
        moved = 0
        for sid in slot_ids:
            index = self._index_of.get(sid)
            if index is None:
                self.append([sid], [])
                moved += 1
            elif index in self._tier:
                self._entries[index] = self._tier.pop(index)
                moved += 1
        if moved:  # Back to append order: a promoted index is an older one.
            self._entries = dict(sorted(self._entries.items()))
        return moved

    def slots(self) -> List[int]:
        """Live ids in append order."""
        return [sid for sid, _ in self._entries.values()]

    def tier_slots(self) -> List[int]:
        """Demoted ids in append order."""
        return [sid for _, (sid, _) in sorted(self._tier.items())]

    def entries(self) -> Tuple[List[int], List[bool]]:
        """Live ids and their pinned flags, in append order."""
        values = list(self._entries.values())
        return [sid for sid, _ in values], [p for _, p in values]

    def fail_open_evictions(self, rule: StreamingRule) -> List[int]:
        """streaming_evictions(rule) and every demoted id, in append order;
        does not remove them."""
        ids = self.streaming_evictions(rule) + self.tier_slots()
        return sorted(ids, key=self._index_of.__getitem__)

    def streaming_evictions(self, rule: StreamingRule) -> List[int]:
        """Keeps sinks, pinned and the `recent` newest; evicts the oldest of
        the rest (whole full blocks with block_size > 1) down to the budget.
        Returns the ids in append order; does not remove them."""
        budget = max(rule.budget, 1)
        need = len(self._entries) - budget
        if need <= 0:
            return []
        recent_from = self.next_index - max(rule.recent, 0)

        def protected(index: int, pinned: bool) -> bool:
            return pinned or index < rule.sinks or index >= recent_from

        evicted: List[int] = []
        items = list(self._entries.items())
        if rule.block_size <= 1:
            for index, (sid, pinned) in items:
                if need == 0:
                    break
                if protected(index, pinned):
                    continue
                evicted.append(sid)
                need -= 1
            return evicted
        n = rule.block_size
        i = 0
        while i < len(items) and need > 0:
            block = items[i][0] // n
            first, end = block * n, block * n + n
            candidate = items[i][0] == first and end <= self.next_index
            ids = []
            expected = first
            while i < len(items) and items[i][0] < end:
                index, (sid, pinned) = items[i]
                candidate = candidate and index == expected and not protected(index, pinned)
                expected += 1
                ids.append(sid)
                i += 1
            candidate = candidate and expected == end
            if not candidate:
                continue
            evicted.extend(ids)
            need -= n
        return evicted
