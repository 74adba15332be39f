"""The client's record of a session's live entries and the local `streaming`
decision it falls back to (the rule of client/src/live_set.cc, exactly)."""

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
        # Python dicts keep insertion order, which is append order here.
        self._entries: Dict[int, tuple] = {}  # index -> (slot_id, pinned)
        self._index_of: Dict[int, int] = {}
        self.next_index = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, slot_id: int) -> bool:
        return slot_id in self._index_of

    def check_append(self, slot_ids: Sequence[int], pinned: Sequence[bool]) -> None:
        """Raises INVALID_ARGUMENT naming append.pinned / append.slot_ids."""
        if len(pinned) and len(pinned) != len(slot_ids):
            raise invalid(f"append.pinned: {len(pinned)} flags for "
                          f"{len(slot_ids)} slot ids")
        seen = set()
        for sid in slot_ids:
            if sid in self._index_of:
                raise invalid(f"append.slot_ids: slot {sid} is already live")
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
            del self._entries[index]
            removed += 1
        return removed

    def slots(self) -> List[int]:
        """Live ids in append order."""
        return [sid for sid, _ in self._entries.values()]

    def entries(self) -> Tuple[List[int], List[bool]]:
        """Live ids and their pinned flags, in append order."""
        values = list(self._entries.values())
        return [sid for sid, _ in values], [p for _, p in values]

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
        items = sorted(self._entries.items())
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
