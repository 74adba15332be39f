"""The client's defaults and its reading of the environment variables
ENTROKV_TARGET and ENTROKV_STEP_DEADLINE_MS (client/src/environment.cc:
DefaultTarget, DefaultStepDeadline, StepDeadlineFromEnvironment)."""

from __future__ import annotations

import math
import os
from typing import Optional

from .errors import invalid

DEFAULT_TARGET = "unix:/run/entrokv/entrokv.sock"
DEFAULT_STEP_DEADLINE = 0.1  # seconds
DEFAULT_CREATE_DEADLINE = 0.2  # seconds


def env_target() -> str:
    """ENTROKV_TARGET when set and not empty, else DEFAULT_TARGET."""
    return os.environ.get("ENTROKV_TARGET") or DEFAULT_TARGET


def env_step_deadline() -> Optional[float]:
    """ENTROKV_STEP_DEADLINE_MS in seconds; None when unset or empty. Raises
    INVALID_ARGUMENT for a value that is not a number of milliseconds from
    0.001 to 1e12 (fractions allowed), as client/src/environment.cc."""
    raw = os.environ.get("ENTROKV_STEP_DEADLINE_MS")
    if not raw:
        return None
    try:
        ms = float(raw) if "_" not in raw else math.nan
    except ValueError:
        ms = math.nan
    # At least 1 us, as C++ (a smaller value truncates to a zero deadline).
    if not ms >= 0.001 or ms > 1e12:
        raise invalid(f'ENTROKV_STEP_DEADLINE_MS: "{raw}" is not a number of '
                      "milliseconds from 0.001 to 1e12")
    return ms / 1000.0
