"""The client's messages about its sessions' link to the sidecar (the C++
library's client/src/state_log.h): a WARNING when a session loses the
sidecar or is created offline, saying whether it will recover, and an INFO
when one is decided by the sidecar again, on the logger "entrokv"."""

from __future__ import annotations

import logging
import math
import threading
import time

from .errors import EntroKvError

_log = logging.getLogger("entrokv")
# Each kind of message is written at most once per this many seconds per
# Client (as C++'s ClientOptions::log).
EVERY = 10.0


class StateLog:
    """Warnings when a session loses the sidecar or is created offline, and
    a note when one is decided by the sidecar again, each kind at most once
    per EVERY per Client, the next saying how many were held back.
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = {}  # kind -> [time written, held back]

    def degraded(self, why: EntroKvError, recovers: bool) -> None:
        self._write("degraded", logging.WARNING,
                    f"a session lost the sidecar ({why}); {self._outlook(recovers)}")

    def offline(self, why: EntroKvError, recovers: bool) -> None:
        self._write("offline", logging.WARNING,
                    f"a session was created offline ({why}); "
                    f"{self._outlook(recovers)}")

    def recovered(self) -> None:
        self._write("recovered", logging.INFO,
                    "a session is decided by the sidecar again")

    @staticmethod
    def _outlook(recovers: bool) -> str:
        if recovers:
            return "its steps are decided locally until it recovers"
        return ("its steps are decided locally for the rest of its life "
                "(no live_keys callback)")

    def _write(self, kind: str, level: int, text: str) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.setdefault(kind, [-math.inf, 0])
            if now - last[0] < EVERY:
                last[1] += 1
                return
            held_back = last[1]
            last[0], last[1] = now, 0
        if held_back:
            text += f" (and {held_back} more like it since the last such message)"
        _log.log(level, "entrokv client: %s", text)
