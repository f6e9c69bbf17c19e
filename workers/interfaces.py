"""The stage interfaces: what a stage receives, what it may use, and what it sends.

Nothing in `workers/` is imported here, so every layer may depend on these: the clients a
stage calls, the stage adapters, and the runtime that runs them (the Kafka loop and the
embedded runner). Layers: `pipeline` ← `topics` ← this ← `workers.clients` ←
`workers.stages` ← `workers.runtime` ← the rest (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pipeline.guards.admission import WorkCaps
from pipeline.policy.document import Policy
from pipeline.policy.routing import RouteConfig
from topics.names import Topic

if TYPE_CHECKING:  # cryptography is loaded by the processes that sign or check
    from topics.security.keys import Signer, TrustedKeys


@dataclass(frozen=True, slots=True)
class Emit:
    """One message to send: logical topic, key, encoded value, headers."""

    topic: Topic
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message as a stage receives it, before decoding."""

    key: bytes | None
    value: bytes | None
    topic: str = ""
    partition: int = -1
    offset: int = -1
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: float | None = None
    """The broker's timestamp of the message, in seconds (None in the embedded runner): on
    `candidates`, when the candidate entered the ladder, the same on every redelivery."""


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """One OpenAI-compatible endpoint a stage calls: all it needs from the settings, so a
    stage can be built (and tested) without the whole `Settings`."""

    url: str = ""
    model: str = ""
    timeout: float = 10.0
    api_key: str = field(default="", repr=False)
    max_in_flight: int = 64
    """Calls open at once to the endpoint from this worker; its candidates are decided
    that many at a time, each concluded as its call returns (`loop.StageLoop._flow`)."""


@dataclass
class ControlState:
    """Operator controls as this worker last saw them on the control topic.

    The kill switch has three states: on, off, and unknown (`known` false: the topic has
    not been read to its end, or cannot be read). While unknown, `kill_switch` is held ON
    so that anything deciding regardless fails closed, but the Kafka loop decides nothing
    then: it holds the batch uncommitted until the state is known (`workers.runtime.loop`).
    """

    kill_switch: bool = False
    kill_switch_by: str = ""
    kill_switch_at: float = 0.0
    known: bool = True
    unknown_spells: int = 0
    """How many times the state has turned unknown: a batch decided across a change of it
    was decided partly blind, and is redone."""

    @property
    def state(self) -> str:
        """`on`, `off` or `unknown`."""
        if not self.known:
            return "unknown"
        return "on" if self.kill_switch else "off"


@dataclass
class StageContext:
    """Everything a stage may use; built once per worker (or per embedded run)."""

    policy: Policy
    default_route: str = "default"
    clock: Callable[[], float] = time.time
    control: ControlState = field(default_factory=ControlState)
    sessions: MutableMapping[str, Any] = field(default_factory=dict)
    services: dict[str, Any] = field(default_factory=dict)
    max_candidate_bytes: int = 1024 * 1024
    caps: WorkCaps = field(default_factory=WorkCaps)
    """GROUNDSTREAM_MAX_*: what one candidate may cost (`pipeline.guards.admission`)."""
    stage_key: bytes | None = None
    """GROUNDSTREAM_STAGE_KEY: envelopes are signed and inner topics verified with it."""
    signer: Signer | None = None
    """GROUNDSTREAM_SIGNING_KEY_FILE: this process's own key; its conclusions and decision
    records are signed with it as they are sent (`kit.signed_emits`). None: unsigned."""
    trusted: TrustedKeys | None = None
    """GROUNDSTREAM_TRUSTED_KEYS_DIR: the stages' public keys, for the terminal writer
    (which delivers only what a stage with the authority signed). None: unchecked."""
    encoder_backend: str = "torch"
    """GROUNDSTREAM_ENCODER_BACKEND: the backend the stage's encoder is loaded with."""
    encoder_cache_rows: int = 20_000
    """GROUNDSTREAM_ENCODER_CACHE_ROWS: embeddings the stage's encoder keeps (LRU)."""
    received: float | None = None
    """`time.perf_counter()` when the stage received the batch in hand (set around each
    batch by `isolation.process_isolated`): a decision's timing counts from there."""
    source_partitions: int = 1
    """How many partitions the stage's source topic has (set by the Kafka loop on each
    assignment; the embedded runner is one): the judge gives each partition its share of
    the judge budgets (`pipeline.judge.budget`)."""

    def route_for(self, name: str | None) -> RouteConfig:
        return self.policy.route(name or self.default_route)


class Stage(Protocol):
    """A stream processor: its name, its source topic, and how it handles a batch."""

    name: str
    source: Topic

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]: ...

    async def close(self) -> None: ...
