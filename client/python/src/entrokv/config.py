"""Session configuration: the Python mirror of entrokv::SessionConfig
(core/include/entrokv/core/config.h), its validation and its wire form.

Every field has the C++ default. `validate_config` names the first bad field
with the same message as C++'s ValidateSessionConfig, so a bad configuration
is rejected before any RPC (and an offline session is never built from one).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import List, Optional

from .errors import EntroKvError, invalid

RANKINGS = ("window", "streaming", "h2o", "tova", "keynorm", "random", "affinity",
            "keydiff", "expected", "birth", "rkv")
BUDGET_CONTROLS = ("fixed", "entropy", "threshold")
ELEMENT_TYPES = ("f32", "f16", "bf16")
QUERY_FORMS = ("per_head", "group_sum")
AFFINITY_UPDATES = ("seed", "logit_ema")
BLOCK_REDUCES = ("mean", "max")
PLACEMENTS = ("cpu", "gpu", "auto")

_MAX_DIMENSION = 1 << 16
_MAX_BUDGET = 1 << 40


@dataclass
class Shape:
    """What the engine sends per step (docs/design.md "Session model").

    Keys are [entry][layer][kv_head][head_dim], queries [layer][q_head][head_dim]
    as the engine hands them over; with sketch_dim = r > 0 the library projects
    both to r columns before sending (sketch.py).
    """

    layers: int = 1
    kv_heads: int = 1
    q_heads: int = 1
    head_dim: int = 64
    element_type: str = "f16"  # On the wire: "f32", "f16" or "bf16".
    sketch_dim: int = 0  # 0: exact; r in [1, head_dim]: project:r.
    query_form: str = "per_head"  # Or "group_sum".

    @property
    def group_size(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def vector_dim(self) -> int:
        return self.sketch_dim if self.sketch_dim > 0 else self.head_dim

    @property
    def query_heads(self) -> int:
        return self.kv_heads if self.query_form == "group_sum" else self.q_heads

    def key_elements(self) -> int:
        """Elements of one entry's keys on the wire."""
        return self.layers * self.kv_heads * self.vector_dim

    def query_elements(self) -> int:
        """Elements of one step's queries on the wire."""
        return self.layers * self.query_heads * self.vector_dim

    def full_key_elements(self) -> int:
        """Elements of one entry's keys as the engine hands them over."""
        return self.layers * self.kv_heads * self.head_dim

    def full_query_elements(self) -> int:
        """Elements of one step's queries as the engine hands them over."""
        return self.layers * self.q_heads * self.head_dim


@dataclass
class AffinityParams:
    update: str = "logit_ema"  # Or "seed".
    beta: float = 1.0
    lambda_: float = 0.9  # logit_ema only; in [0, 1].


@dataclass
class EntropyBudgetParams:
    gamma: float = 0.5
    ema_rate: float = 0.05
    epsilon: float = 1e-3
    min_budget: int = 0  # 0: 1.
    max_budget: int = 0  # 0: ceil(B * (1 + gamma)).


@dataclass
class Protection:
    sinks: int = 0  # The first `sinks` entries ever appended are kept.
    recent: int = 0  # The last `recent` entries appended are kept.


@dataclass
class SessionConfig:
    """A session's configuration, field by field as entrokv::SessionConfig."""

    shape: Shape = field(default_factory=Shape)
    budget: int = 256
    ranking: str = "affinity"
    budget_control: str = "entropy"
    affinity: AffinityParams = field(default_factory=AffinityParams)
    entropy_budget: EntropyBudgetParams = field(default_factory=EntropyBudgetParams)
    h2o_recent_fraction: float = 0.5
    expected_ema_rate: float = 0.05  # expected ranking: query statistics' rate.
    birth_weight: float = 1.0  # birth ranking: eta in a * exp(eta * H_birth).
    # threshold budget control: entries scoring below tau are evicted.
    threshold_tau: float = 0.01
    rkv_lambda: float = 0.1  # rkv ranking: lambda in lambda*a - (1-lambda)*R.
    rkv_sample: int = 64  # rkv ranking: reference keys of the redundancy.
    # Demote tier (docs/step-semantics.md section 12): D entries in the
    # engine's host memory (0: no tier), the promotion margin m on the keep
    # score's scale, and the most promotions P per decision step.
    tier_capacity: int = 0
    tier_promote_margin: float = 0.0
    tier_max_promotions: int = 8
    streaming_sinks: int = 4
    seed: int = 0
    protection: Protection = field(default_factory=Protection)
    block_size: int = 1
    block_reduce: str = "mean"
    block_summary: bool = False
    placement: str = "auto"
    placement_fallback: bool = False
    decide_every: int = 1
    hard_ceiling: int = 0
    scored_layers: List[int] = field(default_factory=list)
    projection_seed: int = 0

    @classmethod
    def for_policy(cls, policy: str, **fields) -> "SessionConfig":
        """A configuration with `policy` ("h2o", "h2o+entropy", "entropy", ...)
        applied and the given fields set (e.g. budget=64, shape=Shape(...))."""
        config = cls(**fields)
        apply_policy_name(policy, config)
        return config

    @property
    def policy(self) -> str:
        """The canonical policy name, e.g. "affinity+entropy"."""
        return f"{self.ranking}+{self.budget_control}"

    def copy(self) -> "SessionConfig":
        return dataclasses.replace(
            self,
            shape=dataclasses.replace(self.shape),
            affinity=dataclasses.replace(self.affinity),
            entropy_budget=dataclasses.replace(self.entropy_budget),
            protection=dataclasses.replace(self.protection),
            scored_layers=list(self.scored_layers))


def apply_policy_name(name: str, config: SessionConfig) -> None:
    """Sets ranking and budget_control from a policy name, as C++'s
    ApplyPolicyName. Raises EntroKvError(INVALID_ARGUMENT) naming `policy`."""
    if name == "entropy":
        config.ranking, config.budget_control = "affinity", "entropy"
        return
    parts = name.split("+")
    if (len(parts) > 2 or parts[0] not in RANKINGS
            or (len(parts) == 2 and parts[1] not in BUDGET_CONTROLS)):
        raise invalid(
            f'policy: unknown policy "{name}" (want '
            'RANKING[+fixed|+entropy|+threshold] or "entropy"; rankings: window, '
            "streaming, h2o, tova, keynorm, random, affinity, keydiff, expected, "
            "birth, rkv)")
    config.ranking = parts[0]
    config.budget_control = parts[1] if len(parts) == 2 else "fixed"


def policy_needs_entropy(config: SessionConfig) -> bool:
    """True when the policy reads the step's entropy (affinity ranking or
    entropy budget): its decision steps must carry an entropy or logits."""
    return (config.ranking in ("affinity", "birth")
            or config.budget_control == "entropy")


# Rankings that need each q head's query (C++'s RankingNeedsPerHeadQueries).
PER_HEAD_RANKINGS = ("h2o", "tova", "expected", "birth", "rkv")


def ranking_needs_queries(ranking: str) -> bool:
    """False for keydiff, whose decision steps may omit queries."""
    return ranking != "keydiff"


def default_scored_layers(model_layers: int) -> List[int]:
    """All layers up to 4; otherwise 4 spread evenly: floor((2i+1)·L/8)."""
    if model_layers <= 4:
        return list(range(model_layers))
    return [(2 * i + 1) * model_layers // 8 for i in range(4)]


def _g(x: float) -> str:
    """A double as absl::StrCat writes it (%.6g)."""
    return "%.6g" % x


def validate_config(c: SessionConfig) -> None:
    """Raises EntroKvError(INVALID_ARGUMENT) naming the first bad field, with
    C++'s ValidateSessionConfig message."""

    def bad(name: str, why: str) -> EntroKvError:
        return invalid(f"{name}: {why}")

    s = c.shape
    for name in ("layers", "kv_heads", "q_heads", "head_dim"):
        v = getattr(s, name)
        if not isinstance(v, int) or v < 1 or v > _MAX_DIMENSION:
            raise bad(f"shape.{name}", f"{v} is outside [1, {_MAX_DIMENSION}]")
    if s.q_heads % s.kv_heads != 0:
        raise bad("shape.q_heads",
                  f"{s.q_heads} is not a multiple of shape.kv_heads {s.kv_heads}")
    if s.sketch_dim < 0 or s.sketch_dim > s.head_dim:
        raise bad("shape.sketch_dim",
                  f"{s.sketch_dim} is outside [0, head_dim {s.head_dim}] (0: exact)")
    if s.query_form not in QUERY_FORMS:
        raise bad("shape.query_form", "unknown query form")
    if s.key_elements() > (1 << 24) or s.query_elements() > (1 << 24):
        raise bad("shape", "layers x heads x head_dim exceeds 2^24 elements")
    if s.element_type not in ELEMENT_TYPES:
        raise bad("shape.element_type", "unknown element type")
    if c.budget < 1 or c.budget > _MAX_BUDGET:
        raise bad("budget", f"{c.budget} is outside [1, 2^40]")
    if c.ranking not in RANKINGS:
        raise bad("ranking", "unknown ranking")
    if c.budget_control not in BUDGET_CONTROLS:
        raise bad("budget_control", "unknown budget controller")
    if c.budget_control == "threshold" and c.ranking in ("window", "streaming"):
        raise bad("budget_control",
                  "threshold compares keep scores with tau, and ranking "
                  f"{c.ranking} scores by append index")
    if not 0.0 <= c.rkv_lambda <= 1.0:
        raise bad("rkv.lambda", f"{_g(c.rkv_lambda)} is outside [0, 1]")
    if not 1 <= c.rkv_sample <= 65536:
        raise bad("rkv.sample", f"{c.rkv_sample} is outside [1, 65536]")
    if not math.isfinite(c.threshold_tau):
        raise bad("threshold.tau", "must be finite")
    a = c.affinity
    if a.update not in AFFINITY_UPDATES:
        raise bad("affinity.update", "unknown update rule")
    if not abs(a.beta) <= 1e6:
        raise bad("affinity.beta", f"{_g(a.beta)} is outside [-1e6, 1e6]")
    if not 0.0 <= a.lambda_ <= 1.0:
        raise bad("affinity.lambda", f"{_g(a.lambda_)} is outside [0, 1]")
    e = c.entropy_budget
    if not 0.0 <= e.gamma < 1.0:
        raise bad("entropy_budget.gamma", f"{_g(e.gamma)} is outside [0, 1)")
    if not 0.0 < e.ema_rate <= 1.0:
        raise bad("entropy_budget.ema_rate", f"{_g(e.ema_rate)} is outside (0, 1]")
    if not (e.epsilon > 0.0 and math.isfinite(e.epsilon)):
        raise bad("entropy_budget.epsilon", "must be finite and > 0")
    if e.min_budget < 0 or e.min_budget > c.budget:
        raise bad("entropy_budget.min_budget",
                  f"{e.min_budget} is outside [0, budget {c.budget}]")
    if e.max_budget != 0 and (e.max_budget < c.budget or e.max_budget > _MAX_BUDGET):
        raise bad("entropy_budget.max_budget",
                  f"{e.max_budget} is outside [budget {c.budget}, 2^40] "
                  "(0 means ceil(budget * (1 + gamma)))")
    if not 0.0 <= c.h2o_recent_fraction <= 1.0:
        raise bad("h2o.recent_fraction",
                  f"{_g(c.h2o_recent_fraction)} is outside [0, 1]")
    if not 0.0 <= c.birth_weight <= 100.0:
        raise bad("birth.weight", f"{_g(c.birth_weight)} is outside [0, 100]")
    if not 0.0 < c.expected_ema_rate <= 1.0:
        raise bad("expected.ema_rate",
                  f"{_g(c.expected_ema_rate)} is outside (0, 1]")
    for name, v in (("streaming_sinks", c.streaming_sinks),
                    ("protection.sinks", c.protection.sinks),
                    ("protection.recent", c.protection.recent)):
        if v < 0 or v > _MAX_BUDGET:
            raise bad(name, f"{v} is outside [0, 2^40]")
    if c.block_size < 1 or c.block_size > 65536:
        raise bad("block_size", f"{c.block_size} is outside [1, 65536]")
    if c.block_reduce not in BLOCK_REDUCES:
        raise bad("block_reduce", "unknown reduction")
    if s.query_form == "group_sum" and c.ranking in PER_HEAD_RANKINGS:
        raise bad("shape.query_form",
                  "group_sum queries give no per-head attention, which ranking "
                  f"{c.ranking} needs")
    if c.block_summary and c.block_size < 2:
        raise bad("block_summary", "needs block granularity (block_size >= 2)")
    if c.block_summary and c.budget < c.block_size:
        raise bad("block_summary",
                  f"budget {c.budget} is below one block of {c.block_size} tokens")
    if c.decide_every < 1 or c.decide_every > 65536:
        raise bad("decide_every", f"{c.decide_every} is outside [1, 65536]")
    if c.hard_ceiling != 0 and (c.hard_ceiling < c.budget
                                or c.hard_ceiling > _MAX_BUDGET):
        raise bad("hard_ceiling",
                  f"{c.hard_ceiling} is outside [budget {c.budget}, 2^40] "
                  "(0: no ceiling)")
    if c.scored_layers:
        if len(c.scored_layers) != s.layers:
            raise bad("scored_layers",
                      f"{len(c.scored_layers)} layers listed for shape.layers "
                      f"{s.layers}")
        for i, l in enumerate(c.scored_layers):
            if l < 0 or l >= _MAX_DIMENSION or (i > 0 and l <= c.scored_layers[i - 1]):
                raise bad("scored_layers",
                          f"entry {i} ({l}) is negative, too large or not above "
                          "the one before (the list must be strictly increasing)")
    if c.placement not in PLACEMENTS:
        raise bad("placement", "unknown placement")
    # The demote tier: its ranges always, its policies with a tier.
    if c.tier_capacity < 0 or c.tier_capacity > _MAX_BUDGET:
        raise bad("tier.capacity",
                  f"{c.tier_capacity} is outside [0, 2^40] (0: no tier)")
    if not (c.tier_promote_margin >= 0.0 and math.isfinite(c.tier_promote_margin)):
        raise bad("tier.promote_margin",
                  f"{_g(c.tier_promote_margin)} is not finite and >= 0")
    if c.tier_max_promotions < 0 or c.tier_max_promotions > _MAX_BUDGET:
        raise bad("tier.max_promotions",
                  f"{c.tier_max_promotions} is outside [0, 2^40]")
    if c.tier_capacity > 0:
        if c.ranking in ("window", "streaming"):
            raise bad("tier.capacity",
                      f"ranking {c.ranking} scores by append index: a demoted "
                      "entry is older than every live candidate and could "
                      "never be promoted")
        if c.budget_control == "threshold":
            raise bad("tier.capacity",
                      "the threshold budget control sets the live count by "
                      "tau, not by the budget the tier's moves are defined "
                      "against")
        if c.block_size > 1:
            raise bad("tier.capacity",
                      f"block_size {c.block_size}: blocks are evicted whole, "
                      "and demoting blocks is not defined (token granularity "
                      "only)")


# --- Wire form ---------------------------------------------------------------


def to_proto(c: SessionConfig, pb2) -> "object":
    """The wire SessionConfig with every field set explicitly (as C++ ToProto)."""
    m = pb2.SessionConfig()
    m.shape.layers = c.shape.layers
    m.shape.kv_heads = c.shape.kv_heads
    m.shape.q_heads = c.shape.q_heads
    m.shape.head_dim = c.shape.head_dim
    m.shape.element_type = ELEMENT_TYPES.index(c.shape.element_type) + 1
    m.shape.sketch_dim = c.shape.sketch_dim
    m.shape.query_form = QUERY_FORMS.index(c.shape.query_form) + 1
    m.budget = c.budget
    m.ranking = RANKINGS.index(c.ranking) + 1
    m.budget_control = BUDGET_CONTROLS.index(c.budget_control) + 1
    m.affinity.update = AFFINITY_UPDATES.index(c.affinity.update) + 1
    m.affinity.beta = c.affinity.beta
    setattr(m.affinity, "lambda", c.affinity.lambda_)
    e = c.entropy_budget
    m.entropy_budget.gamma = e.gamma
    m.entropy_budget.ema_rate = e.ema_rate
    m.entropy_budget.epsilon = e.epsilon
    m.entropy_budget.min_budget = e.min_budget
    m.entropy_budget.max_budget = e.max_budget
    m.h2o.recent_fraction = c.h2o_recent_fraction
    m.expected.ema_rate = c.expected_ema_rate
    m.birth.weight = c.birth_weight
    m.threshold.tau = c.threshold_tau
    setattr(m.rkv, "lambda", c.rkv_lambda)
    m.rkv.sample = c.rkv_sample
    if (c.tier_capacity, c.tier_promote_margin, c.tier_max_promotions) != (0, 0.0, 8):
        # Only when not the default (no tier), as C++ ToProto: a session
        # without a tier is written as before the tier existed.
        m.tier.capacity = c.tier_capacity
        m.tier.promote_margin = c.tier_promote_margin
        m.tier.max_promotions = c.tier_max_promotions
    m.streaming_sinks = c.streaming_sinks
    m.seed = c.seed
    m.protection.sinks = c.protection.sinks
    m.protection.recent = c.protection.recent
    m.block_size = c.block_size
    m.block_reduce = BLOCK_REDUCES.index(c.block_reduce) + 1
    m.block_summary = c.block_summary
    m.placement = PLACEMENTS.index(c.placement) + 1
    m.placement_fallback = c.placement_fallback
    m.decide_every = c.decide_every
    m.hard_ceiling = c.hard_ceiling
    m.scored_layers.extend(c.scored_layers)
    m.projection_seed = c.projection_seed
    return m


def _enum(value: int, names, default: str) -> str:
    if value == 0:
        return default
    if 1 <= value <= len(names):
        return names[value - 1]
    raise EntroKvError.internal(f"entrokv: unknown enum value {value} in a config")


def _opt(m, name: str, default):
    """Field `name` of message `m` when set on the wire, else `default`."""
    return getattr(m, name) if m.HasField(name) else default


def from_proto(m, base: Optional[SessionConfig] = None) -> SessionConfig:
    """A SessionConfig from the wire form; absent fields take `base`'s value
    (default: C++'s defaults). The server's effective config sets them all."""
    b = base.copy() if base is not None else SessionConfig()
    s, bs = m.shape, b.shape
    shape = Shape(
        layers=_opt(s, "layers", bs.layers),
        kv_heads=_opt(s, "kv_heads", bs.kv_heads),
        q_heads=_opt(s, "q_heads", bs.q_heads),
        head_dim=_opt(s, "head_dim", bs.head_dim),
        element_type=_enum(s.element_type, ELEMENT_TYPES, bs.element_type),
        sketch_dim=_opt(s, "sketch_dim", bs.sketch_dim),
        query_form=_enum(s.query_form, QUERY_FORMS, bs.query_form))
    a, ba = m.affinity, b.affinity
    e, be = m.entropy_budget, b.entropy_budget
    return SessionConfig(
        shape=shape,
        budget=_opt(m, "budget", b.budget),
        ranking=_enum(m.ranking, RANKINGS, b.ranking),
        budget_control=_enum(m.budget_control, BUDGET_CONTROLS, b.budget_control),
        affinity=AffinityParams(
            update=_enum(a.update, AFFINITY_UPDATES, ba.update),
            beta=_opt(a, "beta", ba.beta),
            lambda_=_opt(a, "lambda", ba.lambda_)),
        entropy_budget=EntropyBudgetParams(
            gamma=_opt(e, "gamma", be.gamma),
            ema_rate=_opt(e, "ema_rate", be.ema_rate),
            epsilon=_opt(e, "epsilon", be.epsilon),
            min_budget=_opt(e, "min_budget", be.min_budget),
            max_budget=_opt(e, "max_budget", be.max_budget)),
        h2o_recent_fraction=_opt(m.h2o, "recent_fraction", b.h2o_recent_fraction),
        expected_ema_rate=_opt(m.expected, "ema_rate", b.expected_ema_rate),
        birth_weight=_opt(m.birth, "weight", b.birth_weight),
        threshold_tau=_opt(m.threshold, "tau", b.threshold_tau),
        rkv_lambda=_opt(m.rkv, "lambda", b.rkv_lambda),
        rkv_sample=_opt(m.rkv, "sample", b.rkv_sample),
        tier_capacity=_opt(m.tier, "capacity", b.tier_capacity),
        tier_promote_margin=_opt(m.tier, "promote_margin", b.tier_promote_margin),
        tier_max_promotions=_opt(m.tier, "max_promotions", b.tier_max_promotions),
        streaming_sinks=_opt(m, "streaming_sinks", b.streaming_sinks),
        seed=m.seed or b.seed,
        protection=Protection(
            sinks=_opt(m.protection, "sinks", b.protection.sinks),
            recent=_opt(m.protection, "recent", b.protection.recent)),
        block_size=_opt(m, "block_size", b.block_size),
        block_reduce=_enum(m.block_reduce, BLOCK_REDUCES, b.block_reduce),
        block_summary=m.block_summary or b.block_summary,
        placement=_enum(m.placement, PLACEMENTS, b.placement),
        placement_fallback=m.placement_fallback or b.placement_fallback,
        decide_every=_opt(m, "decide_every", b.decide_every),
        hard_ceiling=_opt(m, "hard_ceiling", b.hard_ceiling),
        scored_layers=list(m.scored_layers) or list(b.scored_layers),
        projection_seed=m.projection_seed or b.projection_seed)
