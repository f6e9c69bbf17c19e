"""The stage table: adding a stage is one adapter module plus one row here (and its
verdicts' rows in `workers.stages.routes`). The CLI, the
embedded runner and the worker entry points all loop over this table. A row builds its
stage from the settings, handing each stage only its own endpoint config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.judge.question import JudgeVerdict
from pipeline.rungs.grounding_switch import ON_REJECT_ACTIONS, SwitchAction
from pipeline.rungs.rule_checks import RulesAction
from topics.names import Topic
from workers.clients.discovery import resolve_model
from workers.interfaces import EndpointConfig, Stage
from workers.runtime.settings import Settings
from workers.stages.consistency import ConsistencyStage
from workers.stages.geometry import GeometryStage
from workers.stages.judge import JudgeStage
from workers.stages.judge_ledger import placement
from workers.stages.routes import ASK_JUDGE, DEFER, HOLD, PASS, SCORED, SKIP
from workers.stages.rules import RulesStage
from workers.stages.switch import SwitchStage
from workers.stages.terminal import TerminalStage


@dataclass(frozen=True, slots=True)
class StageRow:
    name: str
    build: Callable[[Settings], Stage]
    verdicts: tuple[str, ...]  # what the stage may conclude; each has a row in `routes`
    preload_encoder: Callable[[Settings], bool] = lambda s: False
    """Load the sentence encoder before joining the group (not on the first batch) when
    every candidate will need it; otherwise it loads on first use, if ever."""
    changelog: Topic | None = None
    """The compacted topic of the stage's state table, written in its transactions."""
    follows: tuple[Topic, ...] = ()
    """Topics the stage also reads to update that table (co-partitioned with its source)."""
    placement: Callable[[bytes], int | None] | None = None
    """The changelog partition of a table key not keyed like the source (the judge's)."""


def sampler(s: Settings) -> EndpointConfig:
    return EndpointConfig(
        s.sampler_url,
        resolve_model("sampler", s.sampler_url, s.sampler_model, s.sampler_api_key),
        s.sampler_timeout,
        s.sampler_api_key,
        s.sampler_max_in_flight,
    )


def judge(s: Settings) -> EndpointConfig:
    return EndpointConfig(
        s.judge_url,
        resolve_model("judge", s.judge_url, s.judge_model, s.judge_api_key),
        s.judge_timeout,
        s.judge_api_key,
        s.judge_max_in_flight,
    )


LADDER: tuple[StageRow, ...] = (
    StageRow(
        "geometry",
        lambda s: GeometryStage(s.reader),
        (SCORED, SKIP, HOLD),
        preload_encoder=lambda s: True,
    ),
    StageRow(
        "switch",
        lambda s: SwitchStage(judge(s)),
        (*SwitchAction, HOLD, ASK_JUDGE),
        changelog=Topic.SESSIONS,
        follows=(Topic.DECISIONS,),
    ),
    StageRow(
        "consistency",
        lambda s: ConsistencyStage(sampler(s), s.nli_path()),
        (PASS, DEFER, HOLD),
        # Embeds samples only: every candidate's when a sampler draws them; otherwise only
        # those that bring their own, so a ladder without samples never holds the model.
        preload_encoder=lambda s: bool(s.sampler_url) and not s.nli_model,
    ),
    StageRow(
        "judge",
        lambda s: JudgeStage(judge(s)),
        (JudgeVerdict.YES, JudgeVerdict.UNSURE, *ON_REJECT_ACTIONS, HOLD),
        # Each input partition's spend of the judge budgets and its verdict cache.
        changelog=Topic.JUDGE_LEDGER,
        placement=placement,
    ),
    StageRow("rules", lambda s: RulesStage(), (*RulesAction, HOLD)),
    # Not a rung: writes every conclusion of the rungs above, once, through its ledger.
    StageRow("terminal", lambda s: TerminalStage(), (), changelog=Topic.OUTCOMES),
)
STAGE_NAMES = tuple(row.name for row in LADDER)


def row(name: str) -> StageRow:
    for r in LADDER:
        if r.name == name:
            return r
    raise KeyError(name)


def build_ladder(settings: Settings) -> list[Stage]:
    return [r.build(settings) for r in LADDER]
