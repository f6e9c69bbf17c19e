"""`groundstream calibrate`: fit a policy file from labelled data.

It embeds every example once, fits the SGI cuts (`fit_thresholds_from_scores`), the DGI
reference direction μ̂ from a reference file's grounded pairs, the DGI cut when the data
has no-context examples, and the grounding model that combines SGI with source support.
Everything it fitted, the data's hashes and the command line go into the policy file, so
a policy can always say where its numbers came from.
"""

from __future__ import annotations

import hashlib
import math
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from pipeline.encoding.chunks import context_chunks
from pipeline.encoding.encoder import INT8_SUFFIX, SentenceEncoder
from pipeline.errors import PolicyError
from pipeline.fit.calibrate import (
    FitResult,
    fit_reference_direction,
    fit_thresholds_from_scores,
)
from pipeline.fit.grounding_model import (
    GroundingFit,
    feature_matrix,
    fit_grounding,
    fit_settings,
)
from pipeline.fit.judge_share import JudgeShare, JudgeShareFit, fit_judge_share
from pipeline.guards.domain import shape_inputs, task_of
from pipeline.guards.familiarity import FAMILIAR_SHARE
from pipeline.policy.defaults import default_claim_head, default_claim_reader
from pipeline.policy.document import ROUTE_FIT_SECTIONS, parse_policy
from pipeline.policy.routing import ACTIVE_APPROVAL
from pipeline.scores.batch import Measured, familiarity_vectors, measure_batch
from pipeline.scores.geometric import compute_dgi_batch, mean_embedding
from pipeline.scores.grounding import FEATURES, grounding_features
from workers.eval.datasets import LabelledCandidate, file_sha256, load_labelled
from workers.eval.reader_figures import fitted_reader_dir, with_reader_record

Progress = Callable[[str, int, int], None]

FIT_PROCEDURE = 5
"""Bumped when `calibrate` writes something else for the same data and options, so the
policy's version names the procedure too (2: an accept cut that nothing meets is inf, and
the grounding model records its fitted domain; 3: features read the answer's core, claim
support is one, and short and long-form answers get their own cuts; 4: the grounding model
carries a familiarity test; 5: scikit-learn's logistic regression and group folds)."""


@dataclass(frozen=True, slots=True)
class Example:
    group: str
    question: str
    context: tuple[str, ...] | None
    response: str
    grounded: bool
    task: str | None = None


def examples_from(path: Path, limit: int | None) -> list[Example]:
    out = []
    for item in load_labelled(path, limit=limit):
        c = item.candidate
        ctx = c.get("context")
        chunks = context_chunks(ctx)
        out.append(
            Example(
                path.name,
                c["question"],
                chunks,
                c["response"],
                item.grounded,
                task_of(c.get("metadata")),
            )
        )
    return out


def fit_reference(path: Path, encoder: SentenceEncoder) -> tuple[np.ndarray, int]:
    """μ̂ from the grounded answers of a labelled file (its no-context pairs)."""
    grounded: list[LabelledCandidate] = [i for i in load_labelled(path) if i.grounded]
    questions = [i.candidate["question"] for i in grounded]
    responses = [i.candidate["response"] for i in grounded]
    q = encoder.encode(questions)
    r = np.stack([mean_embedding(encoder.encode(encoder.windows(text))) for text in responses])
    return fit_reference_direction(q, r), len(grounded)


def _in_batches(
    items: Sequence, size: int, fn: Callable, progress: Progress | None, label: str
) -> list:
    out: list = []
    for start in range(0, len(items), size):
        out += fn(items[start : start + size])
        if progress:
            progress(label, min(start + size, len(items)), len(items))
    return out


def _clean(metrics: dict[str, Any]) -> dict[str, Any]:
    """TOML has no null or NaN: drop them, and make numpy scalars plain."""
    out = {}
    for key, value in metrics.items():
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        out[key] = value.item() if isinstance(value, np.generic) else value
    return out


def fit_examples(
    examples: Sequence[Example],
    *,
    mu: np.ndarray | None,
    max_accept_error: float,
    encoder: SentenceEncoder,
    progress: Progress | None = None,
    max_accept_error_long: float | None = None,
) -> tuple[FitResult, GroundingFit | None]:
    """The SGI / DGI cuts and the grounding model (with its cuts and domain) fitted on
    labelled examples: the one procedure behind `calibrate`, `--route` and
    `--from-decisions`."""
    fit, grounding, _ = fit_with_band(
        examples,
        mu=mu,
        max_accept_error=max_accept_error,
        encoder=encoder,
        progress=progress,
        max_accept_error_long=max_accept_error_long,
    )
    return fit, grounding


def fit_with_band(
    examples: Sequence[Example],
    *,
    mu: np.ndarray | None,
    max_accept_error: float,
    encoder: SentenceEncoder,
    progress: Progress | None = None,
    max_accept_error_long: float | None = None,
    judge_share: JudgeShare | None = None,
    familiar_share: float = FAMILIAR_SHARE,
) -> tuple[FitResult, GroundingFit | None, JudgeShareFit | None]:
    """`fit_examples`, and with `judge_share` the band of the grounding model's
    P(grounded) the judge is asked about (`pipeline.fit.judge_share`), fitted under the
    same bounds on the same answers. The model's familiarity test holds `familiar_share`
    of the answers familiar out of fold (`pipeline.fit.familiarity_model`)."""
    with_ctx = [e for e in examples if e.context is not None]
    without = [e for e in examples if e.context is None]
    measured = _measured(with_ctx, encoder, progress)
    sgi = [m.sgi for m in measured]
    dgi = []
    if without and mu is not None:
        dgi = _in_batches(
            without,
            64,
            lambda b: compute_dgi_batch([(e.question, e.response) for e in b], encoder, mu),
            progress,
            "dgi",
        )
    fit = fit_thresholds_from_scores(
        [(r.value, e.grounded) for r, e in zip(sgi, with_ctx, strict=True) if not r.flagged],
        [(r.value, e.grounded) for r, e in zip(dgi, without, strict=True) if not r.flagged],
        max_accept_error,
    )
    grounding = band = None
    if with_ctx:
        rows = _feature_rows(measured, with_ctx)
        labels = [e.grounded for e in with_ctx]
        groups = [e.group for e in with_ctx]
        contexts = ["\n".join(e.context or ()) for e in with_ctx]
        options: dict[str, Any] = {
            "shapes": [shape_inputs(m.core, m.sgi.context_windows, True) for m in measured],
            "tasks": [e.task for e in with_ctx],
            # The vectors the stage reads (`score_batch`: the core's and the context's
            # window embeddings); the cut holds the share familiar in sample as well as
            # out of fold, so the policy counts its own training answers familiar.
            "vectors": np.array(
                _in_batches(
                    [(e.context or (), m.core) for e, m in zip(with_ctx, measured, strict=True)],
                    64,
                    lambda b: familiarity_vectors(b, encoder),
                    None,
                    "familiarity",
                )
            ),
            "familiar_share": familiar_share,
        }
        grounding = fit_grounding(
            rows,
            labels,
            groups,
            contexts=contexts,
            max_accept_error=max_accept_error,
            max_accept_error_long=max_accept_error_long,
            **options,
        )
        if default_claim_reader() is not None and (read := fitted_reader_dir()) is not None:
            # The model names its reader (start-up serves it only with that one), and the
            # same fit without it is recorded beside it (`calibrate --reader`, issue 32);
            # a reader the cross-validated figures say does not help gets the fit without
            # it, weight exactly 0 (`reader_figures.reader_verdict`), and the rows it reads.
            grounding, rows = with_reader_record(
                grounding,
                read,
                rows,
                labels,
                groups,
                contexts,
                max_accept_error=max_accept_error,
                max_accept_error_long=max_accept_error_long,
                judge_share=judge_share,
                fit_options=options,
            )
        if judge_share is not None:
            band = fit_judge_share(
                feature_matrix(rows),
                np.asarray(labels),
                np.asarray(groups),
                grounding.model,
                judge_share,
                max_error=max_accept_error,
                max_error_long=max_accept_error_long,
                contexts=contexts,
            )
    return fit, grounding, band


def _measured(
    examples: Sequence[Example], encoder: SentenceEncoder, progress: Progress | None
) -> list[Measured]:
    """Geometry, claim support and the claim reader's reading of each answer with a context
    (`measure_batch`), in batches of 64."""
    head, reader = default_claim_head(), default_claim_reader()
    return _in_batches(
        examples,
        64,
        lambda b: measure_batch(
            [(e.question, e.context or (), e.response) for e in b], encoder, head, reader
        ),
        progress,
        "sgi and claims",
    )


def _feature_rows(
    measured: Sequence[Measured], examples: Sequence[Example]
) -> list[dict[str, float]]:
    """The grounding model's features of each measured answer."""
    return [
        grounding_features(e.question, e.context or (), m.core, m.sgi, m.claim, m.reader)
        for m, e in zip(measured, examples, strict=True)
    ]


def _long_bound_entry(max_accept_error_long: float | None) -> dict[str, float]:
    """The long-form regime's own accept-error bound, as the policy records it (nothing
    when the fit used one bound for both regimes)."""
    return {} if max_accept_error_long is None else {"max_accept_error_long": max_accept_error_long}


def _model_entry(grounding: GroundingFit | None) -> dict[str, Any]:
    """How the grounding model was fitted (estimator, regularisation, folds), when one was."""
    return {} if grounding is None else {"model": fit_settings()}


def grounding_cut_table(short: tuple[float, float], long: tuple[float, float]) -> dict[str, float]:
    """(accept, review) of short and of long-form answers, as a policy's `thresholds`
    table names them."""
    return {
        "grounding_accept": short[0],
        "grounding_review": short[1],
        "grounding_accept_long": long[0],
        "grounding_review_long": long[1],
    }


def fitted_sections(fit: FitResult, grounding: GroundingFit | None) -> dict[str, Any]:
    """The `thresholds` and `grounding` tables of a fit, as a policy (or a route) holds them."""
    thresholds: dict[str, float] = {
        "sgi_strong_pass": fit.sgi_strong_pass,
        "sgi_review": fit.sgi_review,
    }
    if not fit.metrics.get("dgi_default_kept"):
        thresholds["dgi_pass"] = fit.dgi_pass
    out: dict[str, Any] = {"thresholds": thresholds}
    if grounding is not None:
        thresholds.update(grounding_cut_table(*grounding.pairs))
        out["grounding"] = {
            **grounding.model.to_dict(),
            "metrics": _clean(dict(grounding.model.metrics)),
        }
    return out


def calibrate(
    data: Sequence[Path],
    out: Path,
    *,
    reference: Path | None,
    max_accept_error: float,
    limit: int | None,
    encoder: SentenceEncoder,
    command: str,
    progress: Progress | None = None,
    max_accept_error_long: float | None = None,
    judge_share: JudgeShare | None = None,
) -> dict[str, Any]:
    """Fit and write a policy file; returns the fitted sections for the CLI to print.
    With `judge_share`, the default route also gets the band of P(grounded) its judge is
    asked about (`judge_share_route`); everything else is written as without it."""
    started = time.time()
    examples = [e for path in data for e in examples_from(path, limit)]
    mu, n_reference = (None, 0) if reference is None else fit_reference(reference, encoder)
    fit, grounding, band = fit_with_band(
        examples,
        mu=mu,
        max_accept_error=max_accept_error,
        encoder=encoder,
        progress=progress,
        max_accept_error_long=max_accept_error_long,
        judge_share=judge_share,
    )
    now = datetime.now(UTC)
    hashes = {p.name: file_sha256(p) for p in data}
    # The version names the fit: same data, options and encoder give the same suffix.
    fingerprint = repr(
        (
            FIT_PROCEDURE,
            FEATURES,
            sorted(hashes.items()),
            limit,
            max_accept_error,
            *(() if max_accept_error_long is None else (max_accept_error_long,)),
            *(() if judge_share is None else (judge_share.share, judge_share.accuracy)),
            *(
                ()
                if judge_share is None or judge_share.max_error is None
                else (judge_share.max_error,)
            ),
            encoder.model_id,
            reference and file_sha256(reference),
            *(
                ()
                if grounding is None or not grounding.model.reader
                else (grounding.model.reader["digest"],)
            ),
        )
    )
    version = f"{now:%Y.%m.%d}-{hashlib.sha256(fingerprint.encode()).hexdigest()[:8]}"
    policy: dict[str, Any] = {
        "policy": {
            "version": version,
            "produced_by": command,
            "produced_at": now.isoformat(timespec="seconds"),
            "note": "Fitted by groundstream calibrate; edit routes freely, refit the numbers.",
        },
        # The model alone: the policy names what to load, the backend setting how to run it.
        "encoder": {"model": encoder.model_id.removesuffix(INT8_SUFFIX)},
        "thresholds": {**fitted_sections(fit, None)["thresholds"], "dgi_pass": fit.dgi_pass},
        "switch": {"on_reject": "fallback"},
        "calibration": {
            "data": {name: {"sha256": digest} for name, digest in hashes.items()},
            "n": fit.n,
            "limit_per_file": limit or 0,
            "max_accept_error": max_accept_error,
            **_long_bound_entry(max_accept_error_long),
            "seconds": round(time.time() - started, 1),
            "fit": _clean(dict(fit.metrics)),
            **_model_entry(grounding),
        },
        "routes": {
            "default": {
                "mode": "evaluate",
                "on_reject": "fallback",
                "latch_escalation": False,
                "breaker_threshold": 5,
                "breaker_cooldown_seconds": 30.0,
            },
            "production": {
                "mode": "shadow",
                "deadline_seconds": 30.0,
                "on_reject": "fallback",
                "breaker_threshold": 5,
                "breaker_cooldown_seconds": 30.0,
            },
        },
    }
    policy.update(_kept_settings(out))
    if mu is not None:
        policy["reference"] = {
            "fitted_on": reference.name if reference else "",
            "data_sha256": file_sha256(reference) if reference else "",
            "n": n_reference,
            "dgi_mu": [float(x) for x in mu],
        }
    if grounding is not None:
        sections = fitted_sections(fit, grounding)
        policy["thresholds"].update(sections["thresholds"])
        policy["grounding"] = sections["grounding"]
    _drop_stale_bands(policy["routes"])
    if band is not None:
        routes = policy["routes"]
        routes[JUDGE_SHARE_ROUTE] = judge_share_route(
            routes.get(JUDGE_SHARE_ROUTE, {}),
            band,
            {"produced_by": command, "produced_at": now.isoformat(timespec="seconds")},
        )
    write_policy(policy, out)
    return policy


JUDGE_SHARE_ROUTE = "default"
"""The route a whole-policy `calibrate --judge-share` fits the band for (with `--route`,
that route)."""


def judge_band(band: JudgeShareFit) -> dict[str, float]:
    """A route's `[routes.NAME.judge_band]` for a fitted band: its P(grounded) cuts, and
    the veto cut the fit found, if any. Used only where a judge is configured
    (`Policy.judged_route`): without one the route decides by its own cuts, as before."""
    return band.cuts | ({} if band.veto is None else {"judge_veto_cut": band.veto})


def _drop_stale_bands(routes: dict[str, Any]) -> None:
    """Drop the fitted band of every kept route that scores by the policy's model: the band
    was fitted on the model this refit replaces. (A route with a model of its own keeps it
    and its band, as `--route` fits are kept.)"""
    for name, table in routes.items():
        if "judge_band" in table and "grounding" not in table:
            routes[name] = {k: v for k, v in table.items() if k not in ROUTE_FIT_SECTIONS}


def judge_share_route(
    table: dict[str, Any], band: JudgeShareFit, provenance: dict[str, Any]
) -> dict[str, Any]:
    """A route table (as the policy holds it) with `band` as its `judge_band`, and the fit's
    provenance and frontier in its `calibration.judge_band`. The band was fitted on the policy's own
    model, so a model of the route's own is dropped with its cuts; the route's settings
    stay as written, so without a judge it decides exactly as before."""
    settings = {k: v for k, v in table.items() if k not in ROUTE_FIT_SECTIONS}
    return settings | {
        "judge_band": judge_band(band),
        "calibration": {"judge_band": provenance | band.to_dict()},
    }


KEPT_SECTIONS = ("routes", "rules", "consistency", "judge")
"""What refitting leaves as the policy file has it: settings people edit, and routes' own
fits (refit with `--route`). Only the numbers `calibrate` fits are rewritten."""


def _kept_settings(out: Path) -> dict[str, Any]:
    """The `KEPT_SECTIONS` of the policy already at `out` (none when there is none)."""
    try:
        existing = tomllib.loads(out.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return {name: existing[name] for name in KEPT_SECTIONS if name in existing}


def refit_version(version: str, fitted: object) -> str:
    """A policy's version after a fit written into it: its base (before any `+`) and a
    hash of what was fitted, so a different fit is a different version."""
    return f"{version.split('+')[0]}+{hashlib.sha256(repr(fitted).encode()).hexdigest()[:8]}"


def write_fit(
    out: Path,
    route: str | None,
    sections: dict[str, Any],
    provenance: dict[str, Any],
    serves: Sequence[str] = (),
) -> dict[str, Any]:
    """Write a fit into the existing policy `out` and give it a new version (the old one
    plus a hash of what was fitted); everything else is left as it is. A route's fitted band
    (`sections["judge_band"]`, `judge_band`) is written with it; a refit without one drops
    the route's old band.

    With a `route`: `[routes.ROUTE.thresholds]`, `[routes.ROUTE.grounding]` and the
    provenance in `[routes.ROUTE.calibration]`; a route the policy lacks is added with the
    default route's settings. Without: the top-level cuts and model, the provenance in
    `[calibration.refit]`. Refuses (PolicyError) to write a policy that would not load.
    """
    try:
        policy = tomllib.loads(out.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(
            "policy file", str(out), f"an existing policy to write the fit into ({exc})"
        ) from None
    if route is None:
        policy.setdefault("thresholds", {}).update(sections["thresholds"])
        if "grounding" in sections:
            policy["grounding"] = sections["grounding"]
            _drop_stale_bands(policy.get("routes", {}))
        policy.setdefault("calibration", {})["refit"] = provenance
    else:
        routes = policy.setdefault("routes", {})
        table = routes.get(route, routes.get("default", {}))
        settings = {k: v for k, v in table.items() if k not in ROUTE_FIT_SECTIONS}
        own = routes.get(route, {})
        cuts = own.get("thresholds", {}) | sections["thresholds"]  # a cut not refitted stays
        grounding = sections.get("grounding", own.get("grounding"))
        fit = {"thresholds": cuts} | ({"grounding": grounding} if grounding else {})
        if serves:  # the kinds this fit is for; a copy of the default route serves none
            settings["tasks"] = sorted(set(own.get("tasks", [])) | set(serves))
        elif route not in routes:
            settings.pop("tasks", None)
        if "judge_band" in sections:
            fit["judge_band"] = sections["judge_band"]
        routes[route] = settings | fit | {"calibration": provenance}
    meta = policy.setdefault("policy", {})
    meta["version"] = refit_version(
        str(meta.get("version", "unversioned")), (sections, sorted(policy.get("routes", {})))
    )
    meta.setdefault("produced_by", provenance.get("produced_by", ""))
    parse_policy(policy, source=str(out))
    write_policy(policy, out)
    return policy


def calibrate_route(
    data: Sequence[Path],
    out: Path,
    route: str,
    *,
    max_accept_error: float,
    limit: int | None,
    encoder: SentenceEncoder,
    command: str,
    progress: Progress | None = None,
    tasks: Sequence[str] = (),
    max_accept_error_long: float | None = None,
    judge_share: JudgeShare | None = None,
) -> dict[str, Any]:
    """`calibrate --route ROUTE`: fit a route's own grounding model and cuts on DATA and
    write them into the existing policy `out` (`write_fit`); returns the route's
    sections for the CLI to print. With `tasks`, only answers of those kinds
    (`metadata.task`) are fitted, and the route serves those kinds (`tasks` in its table).
    With `judge_share`, the route also gets the fitted band as its `judge_band` (used only
    where a judge is configured) and its `calibration` records the frontier."""
    started = time.time()
    examples = [e for path in data for e in examples_from(path, limit)]
    if tasks:
        examples = [e for e in examples if e.task in tasks]
        if not examples:
            raise PolicyError("--task", ", ".join(tasks), "a task kind the data names")
    fit, grounding, band = fit_with_band(
        examples,
        mu=None,
        max_accept_error=max_accept_error,
        encoder=encoder,
        progress=progress,
        max_accept_error_long=max_accept_error_long,
        judge_share=judge_share,
    )
    sections = fitted_sections(fit, grounding)
    provenance = {
        "produced_by": command,
        "produced_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "data": {p.name: {"sha256": file_sha256(p)} for p in data},
        "n": fit.n,
        "max_accept_error": max_accept_error,
        **_long_bound_entry(max_accept_error_long),
        "seconds": round(time.time() - started, 1),
        "fit": _clean(dict(fit.metrics)),
        **_model_entry(grounding),
    }
    if tasks:
        provenance["tasks"] = sorted(tasks)
    if band is None:
        write_fit(out, route, sections, provenance, serves=tasks)
        return sections
    provenance["judge_band"] = band.to_dict()
    sections["judge_band"] = judge_band(band)
    write_fit(out, route, sections, provenance, serves=tasks)
    return sections | {"calibration": provenance}


def calibrate_band(
    data: Sequence[Path],
    out: Path,
    route: str | None,
    *,
    judge_share: JudgeShare,
    max_accept_error: float,
    limit: int | None,
    encoder: SentenceEncoder,
    command: str,
    progress: Progress | None = None,
    tasks: Sequence[str] = (),
    max_accept_error_long: float | None = None,
) -> dict[str, Any]:
    """`calibrate --judge-share S --band-only`: fit only the band a route's judge is asked
    about, on the model and cuts the policy at `out` already has, and write it into the
    route as its `judge_band` (provenance and frontier in `calibration.judge_band`). Every
    other number of the policy stays as it is, so without a judge it decides exactly as
    before (a refit of the model on the same data can differ in its last digits). With
    `tasks`, only answers of those kinds are fitted. Returns the route's table."""
    started = time.time()
    try:
        document = tomllib.loads(out.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(
            "--out", str(out), f"an existing policy to fit the band on ({exc})"
        ) from None
    policy = parse_policy(document, source=str(out))
    name = route or JUDGE_SHARE_ROUTE
    if name not in policy.routes:
        raise PolicyError("--route", name, f"a route of {out} ({', '.join(sorted(policy.routes))})")
    model = policy.grounding_for(name)
    if model is None:
        raise PolicyError(str(out), "no [grounding]", "a policy whose model calibrate fitted")
    examples = [
        e
        for path in data
        for e in examples_from(path, limit)
        if e.context is not None and (not tasks or e.task in tasks)
    ]
    if not examples:
        raise PolicyError("DATA", ", ".join(map(str, data)), "answers with a context to fit on")
    rows = _feature_rows(_measured(examples, encoder, progress), examples)
    band = fit_judge_share(
        feature_matrix(rows),
        np.asarray([e.grounded for e in examples]),
        np.asarray([e.group for e in examples]),
        model,
        judge_share,
        max_error=max_accept_error,
        max_error_long=max_accept_error_long,
        contexts=["\n".join(e.context or ()) for e in examples],
    )
    provenance: dict[str, Any] = {
        "produced_by": command,
        "produced_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "data": {p.name: {"sha256": file_sha256(p)} for p in data},
        "n": len(examples),
        "seconds": round(time.time() - started, 1),
        "fitted_on_version": policy.version,
    }
    if tasks:
        provenance["tasks"] = sorted(tasks)
    table = document["routes"][name]
    table["judge_band"] = judge_band(band)
    table.setdefault("calibration", {})["judge_band"] = provenance | band.to_dict()
    document.setdefault("policy", {})["version"] = refit_version(
        policy.version, (policy.version, name, table["judge_band"])
    )
    parse_policy(document, source=str(out))
    write_policy(document, out)
    return table


def write_policy(policy: dict[str, Any], out: Path) -> None:
    header = (
        "# groundstream policy: thresholds, routes and stage settings.\n"
        f"# Produced by: {policy['policy']['produced_by']}\n"
        "# Routes: mode = off | shadow | evaluate | active; active needs\n"
        f'#   active_approval = "{ACTIVE_APPROVAL}"\n\n'
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + tomli_w.dumps(policy))
