"""entrokv: the Python client of the entrokv KV-cache eviction sidecar.

    import entrokv
    client = entrokv.Client("unix:/run/entrokv/entrokv.sock", step_deadline=0.02)
    session = client.create_session("entropy", budget=256,
                                    shape=entrokv.Shape(layers=4, kv_heads=8,
                                                        q_heads=32, head_dim=128))
    outcome = session.step([slot], keys, queries, entropy=h)
    cache.free(outcome.evicted)

See README.md and the docstrings of Client and Session.
"""

from .config import (AffinityParams, EntropyBudgetParams, Protection,
                     SessionConfig, Shape, apply_policy_name,
                     default_scored_layers, policy_needs_entropy,
                     validate_config)
from .batch import BatchStep, DecodeBatch
from .client import Client, ServerInfo, SessionInfo, SessionStats
from .errors import EntroKvError
from .live_set import LiveSet, StreamingRule
from .session import Session, SessionCounters, StepOutcome, TierCallbacks
from .shadow import (PolicyReport, RecallSummary, ShadowRequest,
                     ShadowStats)
from .sketch import Sketcher, default_projection, splitmix64
from .vectors import Bf16, F16Bits, entropy_of_logits

__all__ = [
    "AffinityParams", "BatchStep", "Bf16", "Client", "DecodeBatch",
    "EntroKvError", "EntropyBudgetParams",
    "F16Bits", "LiveSet", "PolicyReport", "Protection", "RecallSummary", "ServerInfo", "Session", "SessionConfig",
    "SessionCounters", "SessionInfo", "SessionStats", "ShadowRequest",
    "ShadowStats", "Shape", "Sketcher",
    "StepOutcome", "StreamingRule", "TierCallbacks", "apply_policy_name", "default_projection",
    "default_scored_layers", "entropy_of_logits", "policy_needs_entropy",
    "splitmix64", "validate_config",
]
__version__ = "0.1.0"
