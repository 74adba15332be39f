"""Shadow policies: other policies the server runs on a session's steps, to
measure what each would keep (core/include/entrokv/core/shadow.h; the
proto's Shadowing and ShadowStats; docs/choosing-a-policy.md).

    shadowing = ShadowRequest(["h2o", "tova", SessionConfig.for_policy(
        "window", budget=192)])
    session = client.create_session("entropy", budget=256, shape=shape,
                                    shadowing=shadowing)
    ...
    stats = client.get_session(session.id).shadows
    for r in [stats.primary, stats.oracle, *stats.shadows]:
        print(r.policy, r.config.budget, r.recall.mean, r.recall.p10)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

from . import config as _config
from .config import SessionConfig
from .errors import EntroKvError, code_of

# What the session's own config decides for every shadow (the proto's
# Shadowing comment): cleared before sending, so that the server takes the
# session's.
_SESSION_FIELDS = ("shape", "decide_every", "hard_ceiling", "scored_layers",
                   "projection_seed", "placement")


@dataclass
class ShadowRequest:
    """What a session asks for. `policies`: SessionConfigs, or policy names
    (a name runs at the session's own budget). Shape and cadence are the
    session's, whatever a SessionConfig says there."""

    policies: Sequence[Union[SessionConfig, str]] = ()
    score_every: int = 1            # Score one step with queries in every N.
    max_reference_entries: int = 0  # 0: as many as the server allows.

    def to_proto(self, session: SessionConfig, pb2):
        out = pb2.Shadowing(score_every=self.score_every,
                            max_reference_entries=self.max_reference_entries)
        for p in self.policies:
            cfg = (SessionConfig.for_policy(p, budget=session.budget)
                   if isinstance(p, str) else p)
            m = _config.to_proto(cfg, pb2)
            for name in _SESSION_FIELDS:
                m.ClearField(name)
            out.policies.append(m)
        return out


@dataclass
class RecallSummary:
    steps: int = 0      # Steps scored.
    mean: float = 0.0
    p10: float = 0.0    # The 10th percentile (nearest rank).
    min: float = 0.0


@dataclass
class PolicyReport:
    policy: str                  # Canonical name; "oracle" for the oracle.
    config: SessionConfig        # Effective (the oracle's: the session's).
    recall: RecallSummary
    mean_jaccard: float          # Of its live set with the session's.
    live: int
    error: Optional[EntroKvError] = None  # Set: the shadow stopped.


@dataclass
class ShadowStats:
    primary: PolicyReport
    oracle: PolicyReport
    shadows: List[PolicyReport] = field(default_factory=list)
    reference_entries: int = 0
    reference_capacity: int = 0
    reference_bytes: int = 0
    reference_full: bool = False
    steps_observed: int = 0
    score_every: int = 1
    bytes_held: int = 0


def _report_from_proto(m) -> PolicyReport:
    r = m.recall
    error = (EntroKvError(code_of(m.status.code), m.status.message)
             if m.status.code != 0 else None)
    return PolicyReport(
        policy=m.policy, config=_config.from_proto(m.config),
        recall=RecallSummary(steps=r.steps, mean=r.mean, p10=r.p10, min=r.min),
        mean_jaccard=m.mean_jaccard, live=m.live, error=error)


def stats_from_proto(m) -> ShadowStats:
    return ShadowStats(
        primary=_report_from_proto(m.primary),
        oracle=_report_from_proto(m.oracle),
        shadows=[_report_from_proto(s) for s in m.shadows],
        reference_entries=m.reference_entries,
        reference_capacity=m.reference_capacity,
        reference_bytes=m.reference_bytes, reference_full=m.reference_full,
        steps_observed=m.steps_observed, score_every=m.score_every,
        bytes_held=m.bytes_held)
