"""Evaluation report: what the ladder did with labelled candidates, as numbers and plots.

`summarize` reads the decision records an evaluation run produced (the embedded runner's
output), joins them with the ground-truth labels and response lengths, and returns a
JSON-ready dict; `write_report` writes that dict as ``metrics.json`` plus four PNG plots.

What the figures mean (``grounded`` = the label says the answer is right):

* ``outcomes`` / ``switch_actions``: per label, how many candidates ended on each outcome
  topic and got each switch action.
* ``auroc_sgi``: separation of the seed's SGI of the whole response against its context
  (`workers.eval.evaluation.whole_response_sgi`), given to `summarize` by the caller.
  ``auroc_core_sgi``: of the SGI the geometry stage records, that of the answer's core
  (`pipeline.claims.units.answer_core`: what the grounding model reads; a different score).
  ``auroc_dgi`` / ``auroc_grounding_probability``: of the geometry record's DGI score (or
  its ``evidence.grounding_probability``). Each is None when the score saw fewer than
  two classes. ``length_matched_auroc_*``: the same compared only within response-length
  bins (`pipeline.metrics.length_matched_auroc`).
* ``grounded_to_state``: share of grounded answers whose outcome topic is ``state``;
  ``ungrounded_to_state``: the same for ungrounded answers; ``state_ungrounded_share``:
  share of the answers reaching state that are ungrounded (None when none did);
  ``escalation_rate``: share of answers not in state; ``judge_calls``: requests the
  judge stage sent (a judge's cost, retries included; 0 without one).
  ``out_of_range_share`` / ``grounded_out_of_range_share``: share of answers (of grounded
  answers) whose P(grounded) was flagged outside the model's fitted domain (they escalate).
* Length-matched state figures (``*_length_matched``): direct standardisation over
  response-length bins. Lengths are cut into quantile bins; in each bin holding both
  classes the per-class rate of reaching state is measured, and the rates are averaged
  with the pooled share of each bin as weight, i.e. as if grounded and ungrounded
  answers had the same length distribution. ``state_ungrounded_share_length_matched`` =
  π_u·a_u / (π_u·a_u + π_g·a_g) with a_g, a_u those standardised rates and π_g, π_u the
  class shares in the bins used; ``length_matched_coverage`` is the share of answers in
  those bins. This removes the length confound of data where right answers are short.
* ``throughput_per_second``: answers with an outcome per second of ``elapsed_seconds``.

Candidates without a label are ignored (counted in ``n_unlabelled``); labelled ones
without an outcome record are counted in ``n_without_outcome``.
"""

from __future__ import annotations

import importlib.util
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.calibration import calibration_curve

from pipeline.errors import ScoringError
from pipeline.fit.metrics import (
    auroc,
    expected_calibration_error,
    length_bins,
    length_matched_auroc,
    roc_curve,
)
from topics.names import TERMINAL

__all__ = ["OUTCOME_TOPICS", "REPORT_NEEDS", "require_matplotlib", "summarize", "write_report"]

REPORT_NEEDS = "eval --report needs matplotlib: pip install 'groundstream[eval]'"


def require_matplotlib() -> None:
    """The plots need matplotlib, an optional extra: say which one in one line, rather than
    a traceback halfway through a report. Found, not imported: the import can wait until
    the data has been read, so a first run's notices (the font cache) never precede a
    user's error about that data."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ModuleNotFoundError(REPORT_NEEDS, name="matplotlib")


OUTCOME_TOPICS: tuple[str, ...] = tuple(t.value for t in TERMINAL)
"""Outcome topics always listed in the counts (others seen in the records are added):
the terminal topics by name, in their display order."""

LABEL_NAMES = {True: "grounded", False: "ungrounded"}
LENGTH_BINS = 10
"""Quantile bins of response length for the length-matched figures."""
SGI_DISPLAY_MAX = 3.0
"""SGI above this (e.g. the 10.0 degenerate sentinel) is drawn at this value in histograms."""


@dataclass(slots=True)
class _Candidate:
    """What the records say about one labelled candidate."""

    grounded: bool
    outcome: str | None = None
    switch_action: str | None = None
    method: str | None = None
    score: float | None = None
    """The geometry record's score: DGI, or SGI of the answer's core (method `sgi`)."""
    sgi: float | None = None
    """The seed's SGI of the whole response (`whole_response_sgi`), when given."""
    grounding_probability: float | None = None
    claim_support: float | None = None
    """The claim head's score of the weakest claim (`evidence.weakest_claim.score`)."""
    out_of_range: bool = False
    judge_calls: int = 0
    stages: list[str] = field(default_factory=list)


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _length(value: object) -> float:
    """A response length as float, NaN when unknown (left out of length matching)."""
    length = _finite(value)
    return math.nan if length is None else length


def _collect(
    records: Iterable[Mapping[str, Any]],
    labels: Mapping[str, bool],
    sgi: Mapping[str, float] | None = None,
) -> tuple[dict[str, _Candidate], set[str]]:
    """Per labelled candidate id, its outcome, switch action and geometry readings."""
    found: dict[str, _Candidate] = {}
    unlabelled: set[str] = set()
    for record in records:
        cid = str(record.get("candidate_id"))
        if cid not in labels:
            unlabelled.add(cid)
            continue
        cand = found.setdefault(cid, _Candidate(grounded=bool(labels[cid])))
        stage = record.get("stage")
        cand.stages.append(str(stage))
        if stage == "outcome":
            cand.outcome = str(record.get("topic"))
        elif stage == "switch":
            cand.switch_action = str(record.get("action"))
        elif stage == "judge":
            evidence = record.get("evidence")
            calls = evidence.get("calls") if isinstance(evidence, Mapping) else None
            cand.judge_calls += len(calls) if isinstance(calls, list) else 0
        elif stage == "geometry":
            cand.method = record.get("method")
            cand.score = _finite(record.get("score"))
            evidence = record.get("evidence")
            if isinstance(evidence, Mapping):
                cand.grounding_probability = _finite(evidence.get("grounding_probability"))
                cand.out_of_range = bool(evidence.get("out_of_range"))
                weakest = evidence.get("weakest_claim")
                if isinstance(weakest, Mapping):
                    cand.claim_support = _finite(weakest.get("score"))
    for cid, value in (sgi or {}).items():
        if cid in found:
            found[cid].sgi = _finite(value)
    return found, unlabelled


def _share(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _safe(fn: Any, *args: Any, **kwargs: Any) -> float | None:
    """A metric, or None when the data cannot support it (one class, no usable bin)."""
    try:
        return float(fn(*args, **kwargs))
    except ScoringError:
        return None


def _score_metrics(
    name: str, values: list[tuple[float, bool, float]], *, probability: bool = False
) -> dict[str, Any]:
    """AUROC, length-matched AUROC (and ECE for a probability) of (value, label, length)."""
    out: dict[str, Any] = {f"n_{name}": len(values)}
    if values:
        s, y, lens = (np.asarray(col) for col in zip(*values, strict=True))
        y = y.astype(bool)
    else:
        s = y = lens = np.zeros(0)
    out[f"auroc_{name}"] = _safe(auroc, s, y) if len(values) else None
    out[f"length_matched_auroc_{name}"] = (
        _safe(length_matched_auroc, s, y, lens, n_bins=LENGTH_BINS) if len(values) else None
    )
    if probability:
        out[f"ece_{name}"] = _safe(expected_calibration_error, s, y) if len(values) else None
    return out


def _length_matched_state(
    in_state: np.ndarray, grounded: np.ndarray, lens: np.ndarray
) -> dict[str, float | None]:
    """State figures standardised over length bins (see the module docstring)."""
    empty: dict[str, float | None] = {
        "grounded_to_state_length_matched": None,
        "ungrounded_to_state_length_matched": None,
        "state_ungrounded_share_length_matched": None,
        "escalation_rate_length_matched": None,
        "length_matched_coverage": None,
    }
    known = ~np.isnan(lens)
    if not known.any():
        return empty
    in_state, grounded, lens = in_state[known], grounded[known], lens[known]
    bins = length_bins(lens, LENGTH_BINS)
    used = [b for b in np.unique(bins) if 0 < grounded[bins == b].sum() < (bins == b).sum()]
    if not used:
        return empty
    sizes = np.array([(bins == b).sum() for b in used], dtype=np.float64)
    weights = sizes / sizes.sum()
    rate_g = np.array([in_state[(bins == b) & grounded].mean() for b in used])
    rate_u = np.array([in_state[(bins == b) & ~grounded].mean() for b in used])
    a_g, a_u = float(weights @ rate_g), float(weights @ rate_u)
    mask = np.isin(bins, used)
    pi_g = float(grounded[mask].mean())
    pi_u = 1.0 - pi_g
    reached = pi_g * a_g + pi_u * a_u
    return {
        "grounded_to_state_length_matched": a_g,
        "ungrounded_to_state_length_matched": a_u,
        "state_ungrounded_share_length_matched": (pi_u * a_u / reached) if reached else None,
        "escalation_rate_length_matched": 1.0 - reached,
        "length_matched_coverage": float(mask.sum() / known.size),
    }


def summarize(
    records: list[dict[str, Any]],
    labels: Mapping[str, bool],
    lengths: Mapping[str, int],
    elapsed_seconds: float,
    tasks: Mapping[str, str] | None = None,
    sgi: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Evaluation figures of one run; see the module docstring for each key.

    Args:
        records: every decision record of the run (all stages, all candidates).
        labels: candidate id → grounded.
        lengths: candidate id → response length (characters); missing ids are left out
            of the length-matched figures only.
        elapsed_seconds: wall time of the run, for throughput.
        tasks: candidate id → task kind (`metadata.task`: QA, Summary, Data2txt), when the
            data names one; the state figures are then also given per kind (`by_task`).
        sgi: candidate id → SGI of the whole response
            (`workers.eval.evaluation.whole_response_sgi`).
    """
    found, unlabelled = _collect(records, labels, sgi)
    done = {cid: c for cid, c in found.items() if c.outcome is not None}
    n = len(done)

    topics = list(OUTCOME_TOPICS)
    topics += sorted({c.outcome for c in done.values()} - set(topics))  # type: ignore[arg-type]
    outcomes = {name: dict.fromkeys(topics, 0) for name in LABEL_NAMES.values()}
    actions: dict[str, Counter[str]] = {name: Counter() for name in LABEL_NAMES.values()}
    for c in done.values():
        outcomes[LABEL_NAMES[c.grounded]][c.outcome] += 1  # type: ignore[index]
        if c.switch_action is not None:
            actions[LABEL_NAMES[c.grounded]][c.switch_action] += 1

    ids = sorted(done)
    grounded = np.array([done[i].grounded for i in ids], dtype=bool)
    in_state = np.array([done[i].outcome == "state" for i in ids], dtype=bool)
    lens = np.array([_length(lengths.get(i)) for i in ids], dtype=np.float64)

    metrics: dict[str, Any] = {
        "n": n,
        "n_grounded": int(grounded.sum()),
        "n_ungrounded": int(n - grounded.sum()),
        "n_records": len(records),
        "n_unlabelled": len(unlabelled),
        "n_without_outcome": len(set(labels) - set(done)),
        "outcomes": outcomes,
        "switch_actions": {k: dict(sorted(v.items())) for k, v in actions.items()},
    }
    length_of = dict(zip(ids, lens, strict=True))
    library = [(c.sgi, c.grounded, length_of[cid]) for cid, c in done.items() if c.sgi is not None]
    metrics.update(_score_metrics("sgi", library))
    for method, name in (("sgi", "core_sgi"), ("dgi", "dgi")):
        values = [
            (c.score, c.grounded, length_of[cid])
            for cid, c in done.items()
            if c.method == method and c.score is not None
        ]
        metrics.update(_score_metrics(name, values))
    probs = [
        (c.grounding_probability, c.grounded, length_of[cid])
        for cid, c in done.items()
        if c.grounding_probability is not None
    ]
    metrics.update(_score_metrics("grounding_probability", probs, probability=True))
    claims = [
        (c.claim_support, c.grounded, length_of[cid])
        for cid, c in done.items()
        if c.claim_support is not None
    ]
    metrics.update(_score_metrics("claim_support", claims))

    n_state = int(in_state.sum())
    metrics.update(
        grounded_to_state=_share(int((in_state & grounded).sum()), int(grounded.sum())),
        ungrounded_to_state=_share(int((in_state & ~grounded).sum()), int((~grounded).sum())),
        state_ungrounded_share=_share(int((in_state & ~grounded).sum()), n_state),
        escalation_rate=_share(n - n_state, n),
        judge_calls=sum(c.judge_calls for c in done.values()),
        out_of_range_share=_share(sum(c.out_of_range for c in done.values()), n),
        grounded_out_of_range_share=_share(
            sum(c.out_of_range for c in done.values() if c.grounded), int(grounded.sum())
        ),
    )
    metrics.update(_length_matched_state(in_state, grounded, lens))
    kinds = np.array([(tasks or {}).get(i, "") for i in ids])
    metrics["by_task"] = {
        str(kind): {
            "n": int(mask.sum()),
            "grounded_to_state": _share(
                int((in_state & grounded & mask).sum()), int((grounded & mask).sum())
            ),
            "state_ungrounded_share": _share(
                int((in_state & ~grounded & mask).sum()), int((in_state & mask).sum())
            ),
        }
        for kind in sorted(set(kinds) - {""})
        for mask in [kinds == kind]
    }
    metrics["elapsed_seconds"] = float(elapsed_seconds)
    metrics["throughput_per_second"] = n / elapsed_seconds if elapsed_seconds > 0 else None
    return metrics


# --------------------------------------------------------------------------- plots


def _labelled_values(
    found: Mapping[str, _Candidate], attr: str, method: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    pairs = [
        (getattr(c, attr), c.grounded)
        for c in found.values()
        if getattr(c, attr) is not None and (method is None or c.method == method)
    ]
    if not pairs:
        return np.zeros(0), np.zeros(0, dtype=bool)
    values, flags = zip(*pairs, strict=True)
    return np.asarray(values, dtype=np.float64), np.asarray(flags, dtype=bool)


def _series(found: Mapping[str, _Candidate]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, values, labels) for SGI, DGI, the grounding probability and the weakest
    claim's support, where present."""
    out = []
    for name, attr, method in (
        ("SGI", "sgi", None),
        ("SGI of the answer's core", "score", "sgi"),
        ("DGI", "score", "dgi"),
        ("grounding probability", "grounding_probability", None),
        ("weakest claim support", "claim_support", None),
    ):
        values, flags = _labelled_values(found, attr, method)
        if values.size:
            out.append((name, values, flags))
    return out


def _no_data(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _plot_roc(found: Mapping[str, _Candidate], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 6))
    ax = fig.add_subplot()
    drawn = False
    for name, values, flags in _series(found):
        if flags.all() or not flags.any():
            continue
        fpr, tpr, _ = roc_curve(values, flags)
        ax.plot(fpr, tpr, label=f"{name} (AUROC {auroc(values, flags):.3f}, n={values.size})")
        drawn = True
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="chance")
    if not drawn:
        _no_data(ax, "no score with both classes")
    ax.set_xlabel("false positive rate (ungrounded accepted)")
    ax.set_ylabel("true positive rate (grounded accepted)")
    ax.set_title("ROC: grounded (positive) vs ungrounded")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", fontsize="small")
    fig.savefig(path, dpi=100)


def _plot_hist(found: Mapping[str, _Candidate], path: Path) -> None:
    from matplotlib.figure import Figure

    series = _series(found)
    fig = Figure(figsize=(6 * max(1, len(series)), 4.5))
    if not series:
        _no_data(fig.add_subplot(), "no geometry scores")
    for k, (name, values, flags) in enumerate(series):
        ax = fig.add_subplot(1, len(series), k + 1)
        clipped = name.startswith("SGI") and bool((values > SGI_DISPLAY_MAX).any())
        shown = np.minimum(values, SGI_DISPLAY_MAX) if clipped else values
        edges = np.histogram_bin_edges(shown, bins=30)
        for flag, colour in ((True, "tab:green"), (False, "tab:red")):
            ax.hist(
                shown[flags == flag],
                bins=edges,
                alpha=0.6,
                color=colour,
                label=f"{LABEL_NAMES[flag]} (n={int((flags == flag).sum())})",
            )
        note = (
            f" (values above {SGI_DISPLAY_MAX:g} drawn at {SGI_DISPLAY_MAX:g})" if clipped else ""
        )
        ax.set_xlabel(f"{name} value{note}")
        ax.set_ylabel("answers")
        ax.set_title(f"{name} by label")
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _plot_reliability(found: Mapping[str, _Candidate], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 6))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfect calibration")
    probs, flags = _labelled_values(found, "grounding_probability")
    if probs.size:
        curves = [("grounding probability", np.clip(probs, 0.0, 1.0), flags)]
        title = "Reliability of grounding_probability"
        xlabel = "mean predicted grounding probability"
    else:
        curves = []
        for name, values, labs in _series(found):
            lo, hi = float(values.min()), float(values.max())
            scaled = (values - lo) / (hi - lo) if hi > lo else np.full(values.shape, 0.5)
            curves.append((f"{name} (min-max scaled)", scaled, labs))
        title = "Reliability of min-max-scaled scores (not probabilities)"
        xlabel = "mean min-max-scaled score"
    for name, values, labs in curves:
        known = ~np.isnan(values)
        observed, predicted = calibration_curve(labs[known].astype(int), values[known], n_bins=10)
        ax.plot(
            predicted,
            observed,
            marker="o",
            label=f"{name} (ECE {expected_calibration_error(values, labs):.3f})",
        )
    if not curves:
        _no_data(ax, "no scores")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("observed share grounded")
    ax.set_title(title)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", fontsize="small")
    fig.savefig(path, dpi=100)


def _plot_actions(found: Mapping[str, _Candidate], path: Path) -> None:
    from matplotlib.figure import Figure

    done = [c for c in found.values() if c.outcome is not None]
    topics = list(OUTCOME_TOPICS)
    topics += sorted({str(c.outcome) for c in done} - set(topics))
    groups = [True, False]
    totals = [sum(1 for c in done if c.grounded == g) for g in groups]
    fig = Figure(figsize=(7, 5))
    ax = fig.add_subplot()
    bottom = np.zeros(len(groups))
    for topic in topics:
        counts = np.array(
            [sum(1 for c in done if c.grounded == g and c.outcome == topic) for g in groups],
            dtype=np.float64,
        )
        if not counts.any():
            continue
        shares = np.divide(counts, totals, out=np.zeros_like(counts), where=np.array(totals) > 0)
        ax.bar(
            [f"{LABEL_NAMES[g]}\n(n={t})" for g, t in zip(groups, totals, strict=True)],
            shares,
            bottom=bottom,
            label=topic,
        )
        bottom += shares
    ax.set_ylabel("share of answers")
    ax.set_ylim(0, 1)
    ax.set_title("Outcome topic by label")
    if done:
        ax.legend(title="outcome topic", fontsize="small", loc="upper left", bbox_to_anchor=(1, 1))
    else:
        _no_data(ax, "no outcomes")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def write_report(
    metrics: dict[str, Any],
    records: list[dict[str, Any]],
    labels: Mapping[str, bool],
    out_dir: Path,
    sgi: Mapping[str, float] | None = None,
) -> list[Path]:
    """Write ``metrics.json`` and the plots into ``out_dir`` (created if missing).

    Plots: ``roc.png`` (ROC of SGI (the whole response's, given as `sgi`), the core's SGI, DGI
    and the grounding probability where present),
    ``score_hist.png`` (score histograms by label), ``reliability.png`` (reliability of
    the grounding probability, or of min-max-scaled scores when there is none; the title
    says which), ``actions.png`` (outcome-topic mix per label). Returns the paths written.
    Needs matplotlib (the ``eval`` extra; see `require_matplotlib`); no global backend is set.
    """
    import orjson

    require_matplotlib()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    found, _ = _collect(records, labels, sgi)
    metrics_path = out_dir / "metrics.json"
    metrics_path.write_bytes(
        orjson.dumps(
            metrics,
            option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY,
        )
        + b"\n"
    )
    written = [metrics_path]
    for name, plot in (
        ("roc.png", _plot_roc),
        ("score_hist.png", _plot_hist),
        ("reliability.png", _plot_reliability),
        ("actions.png", _plot_actions),
    ):
        path = out_dir / name
        plot(found, path)
        written.append(path)
    return written
