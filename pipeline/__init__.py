"""groundstream's deterministic core: scores, checks, the switch, the later stages'
decisions, decision records and calibration. No Kafka, no event loop, and importing it
loads no model and no torch: only the stages that embed build an encoder.
"""

from pipeline.calibrate import FitResult, fit_thresholds
from pipeline.check import Check, Level, check
from pipeline.errors import GroundstreamError, PolicyError, ScoringError
from pipeline.policy import Policy, load_policy, parse_policy
from pipeline.results import DGIResult, SGIResult
from pipeline.routing import Mode, Next, RouteConfig
from pipeline.scores import compute_dgi, compute_dgi_batch, compute_sgi, compute_sgi_batch
from pipeline.switch import GroundingSwitch, SwitchAction, SwitchDecision
from pipeline.thresholds import DGI_PASS, SGI_REVIEW, SGI_STRONG_PASS, Thresholds

__all__ = [
    "DGI_PASS",
    "SGI_REVIEW",
    "SGI_STRONG_PASS",
    "Check",
    "DGIResult",
    "FitResult",
    "GroundingSwitch",
    "GroundstreamError",
    "Level",
    "Mode",
    "Next",
    "Policy",
    "PolicyError",
    "RouteConfig",
    "SGIResult",
    "ScoringError",
    "SwitchAction",
    "SwitchDecision",
    "Thresholds",
    "check",
    "compute_dgi",
    "compute_dgi_batch",
    "compute_sgi",
    "compute_sgi_batch",
    "fit_thresholds",
    "load_policy",
    "parse_policy",
]
