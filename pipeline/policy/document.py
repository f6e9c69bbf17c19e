"""The policy: every threshold, route and stage setting, loaded from one TOML file.

`groundstream calibrate` writes policy files; `verify`, the workers and `check()` load
them (`--policy` / GROUNDSTREAM_POLICY). The shipped default (`pipeline/data/
default_policy.toml`) was itself produced by `calibrate` and says so in its header.
Every invalid value raises `PolicyError` naming the setting, so a worker fails at start-up
rather than on a message.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pipeline.bounds.thresholds import LONG_CUTS, Thresholds
from pipeline.bounds.validation import number, real
from pipeline.errors import PolicyError
from pipeline.guards.language import encoder_languages
from pipeline.judge.question import JudgeConfig
from pipeline.policy.attach import AttachMapping
from pipeline.policy.routing import BELOW_REVIEW_ON_REJECT, Mode, RouteConfig
from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction, parse_on_reject
from pipeline.rungs.rule_checks import RulesConfig
from pipeline.rungs.self_consistency import ConsistencyConfig
from pipeline.scores.grounding import GroundingModel

DEFAULT_POLICY_PATH = Path(__file__).parent.parent / "data" / "default_policy.toml"
SECTIONS: Mapping[str, str] = MappingProxyType(
    {
        "policy": "The policy's version (recorded on every decision) and `calibrate`'s notes.",
        "encoder": "The sentence encoder the cuts were fitted with.",
        "thresholds": "The cut-points on SGI, DGI and P(grounded).",
        "switch": "What the switch does with an answer below the review cut.",
        "reference": "DGI's grounded direction, for answers without a context.",
        "grounding": "The P(grounded) model `calibrate` fits: features, coefficients, guards.",
        "calibration": "Where the fit came from and its figures, as `calibrate` wrote them.",
        "routes": "One table per route: its mode, deadline, judge use and budgets, own fit.",
        "rules": "The rules stage's checks, which every path to `state` passes.",
        "consistency": "How consistency samples and groups answers by meaning.",
        "judge": "The LLM judge's bars, readout, time limit and context size.",
        "attach": "How `groundstream attach` reads your own messages (`pipeline.policy.attach`).",
    }
)
"""Each top-level table a policy may have, and what it holds; any other is refused."""


@dataclass(frozen=True, slots=True)
class Key:
    """A policy key `parse_policy` reads itself (a section with a config class has its
    keys in the class's fields): its TOML type, its default and what it means."""

    type: str
    default: Any
    meaning: str


KEYS: Mapping[str, Key] = MappingProxyType(
    {
        "policy.version": Key(
            "string", "unversioned", "Names the policy on every decision record it decides."
        ),
        "encoder.model": Key(
            "string",
            "sentence-transformers/all-MiniLM-L6-v2",
            "The encoder's directory or model id; the cuts hold only for the one fitted with.",
        ),
        "switch.on_reject": Key(
            "string",
            "fallback",
            "Where an answer below the review cut goes (`escalate`: to the ladder's next rung).",
        ),
        "reference.dgi_mu": Key(
            "list of numbers",
            None,
            "DGI's grounded direction μ̂; unset, an answer without a context gets no DGI.",
        ),
    }
)
"""The keys of the sections without a config class, with their defaults: `parse_policy`
reads each default here, and the reference (docs/reference/policy.md) prints this table."""


ROUTE_FIT_SECTIONS = ("thresholds", "grounding", "calibration", "judge_band")
"""A route's own fit, written by `calibrate --route NAME` as `[routes.NAME.thresholds]` and
`[routes.NAME.grounding]` (with its provenance in `[routes.NAME.calibration]`): an
extractive-QA route and a summarising route are different populations. A route without
them uses the policy's top-level fit. `[routes.NAME.judge_band]` is the band a judge is
asked about (`calibrate --judge-share`), used only where a judge is configured."""

JUDGE_BAND_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "grounding_accept": "At or above this P(grounded) a short answer goes to state unjudged.",
        "grounding_review": "Below this P(grounded) a short answer takes the route's on_reject "
        "unjudged; between the two cuts the judge is asked.",
        "grounding_accept_long": "`grounding_accept` for long-form answers.",
        "grounding_review_long": "`grounding_review` for long-form answers.",
        "judge_veto_cut": "A judge's yes below this P(grounded) goes to a person (unset: none).",
    }
)
"""The keys of a `[routes.NAME.judge_band]`, the band a judge is asked about (`calibrate
--judge-share`), used only where a judge is configured; a cut it leaves out is the route's."""

JUDGE_BAND_CUTS = tuple(k for k in JUDGE_BAND_KEYS if k != "judge_veto_cut")
"""The band's P(grounded) cuts, as a `thresholds` table names them."""


UNKNOWN_ROUTE = "unknown_route"
"""The record's `gate` when a candidate names a route the policy does not have."""


@dataclass(frozen=True, slots=True)
class RouteFit:
    """A route's own cuts (its table's cuts over the policy's) and, if fitted, its model."""

    thresholds: Thresholds
    grounding: GroundingModel | None
    judged: Thresholds | None = None
    """The cuts with a judge configured: the route's `judge_band` over its own cuts, or
    None where the route has no band (a judge then changes no cut)."""


@dataclass(frozen=True, slots=True)
class Policy:
    """A validated policy. Build with `parse_policy` / `load_policy`."""

    version: str = "seed"
    thresholds: Thresholds = field(default_factory=Thresholds)
    on_reject: SwitchAction = SwitchAction.FALLBACK
    encoder_model: str | None = None
    reference: tuple[float, ...] | None = None
    grounding: GroundingModel | None = None
    routes: Mapping[str, RouteConfig] = field(
        default_factory=lambda: MappingProxyType({"default": RouteConfig()})
    )
    rules: RulesConfig = field(default_factory=RulesConfig)
    consistency: ConsistencyConfig = field(default_factory=ConsistencyConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    calibration: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str = "<built-in>"
    sha256: str = ""
    route_fits: Mapping[str, RouteFit] = field(default_factory=lambda: MappingProxyType({}))
    attach: AttachMapping | None = None
    """How `groundstream attach` reads a user's own messages (`[attach]`), if it is used."""
    judged_routes: Mapping[str, RouteConfig] = field(default_factory=lambda: MappingProxyType({}))
    """Each route with a `judge_band`, as it decides with a judge configured."""

    def switch(self, route: RouteConfig | None = None, judged: bool = False) -> GroundingSwitch:
        """The switch for a route: the route's thresholds (with a judge configured, its
        band's, `judged`), the route's on_reject."""
        if route is None:
            return GroundingSwitch.from_thresholds(self.thresholds, self.on_reject)
        return GroundingSwitch.from_thresholds(
            self.thresholds_for(route.name, judged), route.on_reject
        )

    def thresholds_for(self, route: str, judged: bool = False) -> Thresholds:
        """The cuts a route's candidates are judged by: its own fit's, else the policy's;
        with a judge configured (`judged`) and a fitted band, the band's."""
        fit = self.route_fits.get(route)
        if fit is None:
            return self.thresholds
        return fit.judged if judged and fit.judged is not None else fit.thresholds

    def judged_route(self, route: RouteConfig) -> RouteConfig:
        """`route` as it decides with a judge configured. With a fitted band only the band
        is asked: below it the route's on_reject, above it state, each unjudged (the band's
        cuts are `thresholds_for(..., judged=True)`), and a judge's yes below the band's veto
        cut goes to a person. Without a band, `route` as written."""
        return self.judged_routes.get(route.name, route)

    def grounding_for(self, route: str) -> GroundingModel | None:
        """The grounding model a route's candidates are scored by: its own, else the policy's."""
        fit = self.route_fits.get(route)
        return self.grounding if fit is None or fit.grounding is None else fit.grounding

    def languages_for(self, route: str) -> tuple[str, ...]:
        """The languages a route's candidates may be accepted in on geometry's word: the
        route's `languages`, else those the encoder's card lists (`pipeline.guards.language`)."""
        own = self.route(route).languages
        return own if own is not None else encoder_languages(self.encoder_model)

    def route_serving(self, task: str | None) -> str | None:
        """The route that serves candidates of task kind `task` (its `tasks` name it) when
        they name no route of their own; None when no route claims the kind."""
        if task is None:
            return None
        return next((name for name, r in self.routes.items() if task in r.tasks), None)

    def route_name(self, named: str | None, task: str | None, default: str) -> str:
        """The route a candidate goes to: the one it names, else the one serving its task
        kind, else `default` (the worker's GROUNDSTREAM_DEFAULT_ROUTE)."""
        return named or self.route_serving(task) or default

    def route(self, name: str) -> RouteConfig:
        """The named route; an unknown name fails closed to a route in `off` mode
        (`unknown_route` says why, for the record)."""
        if name in self.routes:
            return self.routes[name]
        return RouteConfig(name=name, mode=Mode.OFF)

    def unknown_route(self, name: str) -> str | None:
        """Why `name` is served as mode `off` when the policy has no such route, naming
        the routes it has; None for a known route. A misspelt route otherwise reads as a
        deliberate `off` in every record."""
        if name in self.routes:
            return None
        return f"unknown route {name!r} (the policy has {', '.join(sorted(self.routes))})"

    def thresholds_dict(self, route: str | None = None, judged: bool = False) -> dict[str, float]:
        if route is None:
            return self.thresholds.to_dict()
        return self.thresholds_for(route, judged).to_dict()


def _section(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, Mapping):
        raise PolicyError(name, value, "a table")
    return value


def parse_policy(data: Mapping[str, Any], *, source: str = "<mapping>", sha256: str = "") -> Policy:
    """Validate a decoded policy document."""
    for key in data:
        if key not in SECTIONS:
            raise PolicyError(key, "…", f"a known section: {', '.join(sorted(SECTIONS))}")
    meta = _section(data, "policy")
    version = meta.get("version", KEYS["policy.version"].default)
    if not isinstance(version, str) or not version:
        raise PolicyError("policy.version", version, "a non-empty string")
    thresholds = _thresholds(_section(data, "thresholds"), "thresholds", Thresholds())
    on_reject = parse_on_reject(
        _section(data, "switch").get("on_reject", KEYS["switch.on_reject"].default),
        "switch.on_reject",
    )
    encoder = _section(data, "encoder")
    model = encoder.get("model", KEYS["encoder.model"].default)
    if model is not None and (not isinstance(model, str) or not model):
        raise PolicyError("encoder.model", model, "a model directory path or the default id")
    reference = _section(data, "reference").get("dgi_mu", KEYS["reference.dgi_mu"].default)
    if reference is not None:
        if (
            not isinstance(reference, list)
            or len(reference) < 2
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in reference)
        ):
            raise PolicyError("reference.dgi_mu", "…", "a list of numbers (the unit direction μ̂)")
        reference = tuple(float(x) for x in reference)
    routes_raw = _section(data, "routes")
    routes: dict[str, RouteConfig] = {}
    route_fits: dict[str, RouteFit] = {}
    judged_routes: dict[str, RouteConfig] = {}
    for name in routes_raw:
        table = _section(routes_raw, name)
        settings = {k: v for k, v in table.items() if k not in ROUTE_FIT_SECTIONS}
        routes[name] = RouteConfig.from_mapping(name, settings)
        if "thresholds" in table or "grounding" in table or "judge_band" in table:
            cuts = _thresholds(
                _section(table, "thresholds"), f"routes.{name}.thresholds", thresholds
            )
            band = _section(table, "judge_band") if "judge_band" in table else None
            route_fits[name] = RouteFit(
                cuts,
                GroundingModel.from_mapping(_section(table, "grounding")),
                None if band is None else _band_cuts(band, name, cuts),
            )
            if band is not None:
                judged_routes[name] = _judged(routes[name], band)
    routes = routes or {"default": RouteConfig()}
    claimed: dict[str, str] = {}
    for name, route in routes.items():
        for task in sorted(route.tasks):
            if task in claimed:
                raise PolicyError(
                    f"routes.{name}.tasks",
                    task,
                    f"a task kind no other route serves (route {claimed[task]!r} does)",
                )
            claimed[task] = name
    return Policy(
        version=version,
        thresholds=thresholds,
        on_reject=on_reject,
        encoder_model=None if model == KEYS["encoder.model"].default else model,
        reference=reference,
        grounding=GroundingModel.from_mapping(_section(data, "grounding")),
        routes=MappingProxyType(routes),
        rules=RulesConfig.from_mapping(_section(data, "rules")),
        consistency=ConsistencyConfig.from_mapping(_section(data, "consistency")),
        judge=JudgeConfig.from_mapping(_section(data, "judge")),
        calibration=MappingProxyType(dict(_section(data, "calibration"))),
        source=source,
        sha256=sha256,
        route_fits=MappingProxyType(route_fits),
        judged_routes=MappingProxyType(judged_routes),
        attach=AttachMapping.parse(_section(data, "attach")) if "attach" in data else None,
    )


def _thresholds(table: Mapping[str, Any], prefix: str, base: Thresholds) -> Thresholds:
    """The cuts of a `thresholds` table; a cut it leaves out is `base`'s, but a table that
    sets a short-answer grounding cut and not its long-form twin sets both (a policy
    written before long-form cuts existed keeps one cut for every answer)."""
    values = {name: real(table, prefix, name, getattr(base, name)) for name in Thresholds.__slots__}
    for long, short in LONG_CUTS.items():
        if long not in table and short in table:
            values[long] = values[short]
    return Thresholds(**values)


def _band_cuts(band: Mapping[str, Any], route: str, base: Thresholds) -> Thresholds:
    """A `[routes.ROUTE.judge_band]`'s cuts over the route's own (`base`)."""
    prefix = f"routes.{route}.judge_band"
    for key in band:
        if key not in JUDGE_BAND_KEYS:
            raise PolicyError(f"{prefix}.{key}", band[key], f"one of {', '.join(JUDGE_BAND_KEYS)}")
    return _thresholds({k: band[k] for k in JUDGE_BAND_CUTS if k in band}, prefix, base)


def _judged(route: RouteConfig, band: Mapping[str, Any]) -> RouteConfig:
    """`route` with a judge configured and a fitted band: nothing above or below the band
    is asked (the band's share would not hold), the band's veto cut, if any."""
    veto = number(band, f"routes.{route.name}.judge_band", "judge_veto_cut", None)
    if veto is not None and not 0.0 <= veto <= 1.0:
        raise PolicyError(
            f"routes.{route.name}.judge_band.judge_veto_cut", veto, "a number in [0, 1]"
        )
    return replace(
        route,
        below_review_with_judge=BELOW_REVIEW_ON_REJECT,
        judge_accept_cut=None,
        reader_accept_cut=None,
        judge_veto_cut=veto,
    )


POLICY_ENV = "GROUNDSTREAM_POLICY"


def load_policy(path: str | Path | None = None) -> Policy:
    """Read and validate a policy file: `path`, else $GROUNDSTREAM_POLICY, else the shipped
    default — so `check(score, load_policy().thresholds)` agrees with the workers."""
    file = Path(path or os.environ.get(POLICY_ENV) or DEFAULT_POLICY_PATH)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise PolicyError(
            "policy file", str(file), f"a readable TOML file ({exc.strerror})"
        ) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PolicyError("policy file", str(file), f"valid TOML ({exc})") from None
    return parse_policy(data, source=str(file), sha256=hashlib.sha256(raw).hexdigest())
