"""groundstream's deterministic core: scores, checks, the switch, the later stages'
decisions and decision records. No Kafka, no event loop, and importing it loads no model,
no torch and no fitting code (that is `pipeline.fit`): only the stages that embed build
an encoder.

`check`, `GroundingSwitch`, `compute_sgi`, `compute_dgi` and `score_candidate` come from
`pipeline.policy.defaults`: given no thresholds, encoder or μ̂, they use the active policy's
(GROUNDSTREAM_POLICY, else the shipped one), so a library user gets the workers' verdict.
The seed's cuts stay available by name (`SGI_STRONG_PASS`, ..., `Thresholds.seed()`).
"""

from importlib.metadata import PackageNotFoundError, version

from pipeline.bounds.thresholds import DGI_PASS, SGI_REVIEW, SGI_STRONG_PASS, Thresholds
from pipeline.errors import GroundstreamError, PolicyError, ScoringError
from pipeline.policy.defaults import (
    GroundingSwitch,
    check,
    compute_dgi,
    compute_sgi,
    default_policy,
    score_candidate,
)
from pipeline.policy.document import Policy, load_policy, parse_policy
from pipeline.policy.routing import Mode, RouteConfig
from pipeline.rungs.grounding_switch import SwitchAction, SwitchDecision
from pipeline.scores.check import Check, Level
from pipeline.scores.geometric import Encoder, compute_dgi_batch, compute_sgi_batch
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult

try:
    __version__ = version("groundstream")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0"

__all__ = [
    "DGI_PASS",
    "SGI_REVIEW",
    "SGI_STRONG_PASS",
    "Check",
    "DGIResult",
    "Encoder",
    "GroundingScore",
    "GroundingSwitch",
    "GroundstreamError",
    "Level",
    "Mode",
    "Policy",
    "PolicyError",
    "RouteConfig",
    "SGIResult",
    "ScoringError",
    "SwitchAction",
    "SwitchDecision",
    "Thresholds",
    "__version__",
    "check",
    "compute_dgi",
    "compute_dgi_batch",
    "compute_sgi",
    "compute_sgi_batch",
    "default_policy",
    "load_policy",
    "parse_policy",
    "score_candidate",
]
