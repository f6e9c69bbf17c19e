"""`groundstream encoder compare`: the int8 encoder against fp32, on labelled candidates.

Why it exists
    An int8 graph is faster, and what it changes is not visible in a cosine: SGI is a
    ratio of two distances, so an embedding error that is small against 1 can be large
    against their difference. This measures what the quality bar of docs/benchmarks.md
    ("Quantised encoder") asks about, on the same candidates for both encoders:

    * the whole response's SGI of each candidate (`evaluation.whole_response_sgi`):
      max and p99 of |SGI int8 − SGI fp32|;
    * AUROC of SGI and of P(grounded) (the geometry record's
      ``evidence.grounding_probability``), per file, for both;
    * the switch's action under the policy, from the embedded ladder as `groundstream eval`
      runs it (`workers.runtime.verify.run_lines`): the share identical, and the ids of
      the candidates that differ;
    * both encoders' raw rate (texts/s, `encode_uncached`) on the same texts, in
      alternating rounds so a load change hits both.

    The fp32 side is the ONNX backend (equal to torch within 1e-4 cosine); the int8 side
    is `GROUNDSTREAM_ENCODER_BACKEND=onnx-int8`'s graph, or, with a calibration file, a
    static (QDQ) graph calibrated on that file's texts, which must not be the measured
    ones. The last line is the verdict against the bar.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.encoding.chunks import context_chunks
from pipeline.encoding.encoder import SentenceEncoder
from pipeline.errors import GroundstreamError, ScoringError
from pipeline.fit.metrics import auroc
from pipeline.policy.document import Policy
from workers.eval.datasets import LabelledCandidate, load_labelled
from workers.eval.evaluation import whole_response_sgi
from workers.runtime.settings import Settings
from workers.runtime.verify import make_context, run_lines

SGI_BAR = 0.01
"""|SGI int8 − SGI fp32| at most this for every candidate."""
AUROC_BAR = 0.005
"""|AUROC int8 − AUROC fp32| at most this, for SGI and for P(grounded), in every file."""
DECISIONS_BAR = 0.995
"""Share of candidates whose switch action is the same under both encoders."""
RATE_TEXTS = 1000
"""Texts timed for the raw rate (the first candidates' questions, responses and windows)."""
RATE_ROUNDS = 3
CALIBRATION_RECORDS = 200
"""Records of the calibration file whose texts set the static graph's activation ranges."""


class CompareError(GroundstreamError, ValueError):
    """The comparison cannot run as asked (a user mistake, said in one line)."""


@dataclass
class Side:
    """What one encoder made of one file's candidates."""

    sgi: dict[str, float] = field(default_factory=dict)
    probability: dict[str, float] = field(default_factory=dict)
    action: dict[str, str] = field(default_factory=dict)


@dataclass
class FileResult:
    """Both sides of one file, and the labels."""

    name: str
    labels: dict[str, bool]
    fp32: Side
    int8: Side

    def sgi_diffs(self) -> np.ndarray:
        common = sorted(self.fp32.sgi.keys() & self.int8.sgi.keys())
        return np.array([abs(self.int8.sgi[c] - self.fp32.sgi[c]) for c in common])

    def auroc_of(self, side: Side, kind: str) -> float | None:
        values: Mapping[str, float] = side.sgi if kind == "sgi" else side.probability
        ids = [c for c in values if c in self.labels]
        try:
            scores = np.array([values[c] for c in ids])
            return auroc(scores, np.array([self.labels[c] for c in ids]))
        except ScoringError:  # one class only (a small --limit)
            return None

    def differing(self) -> list[str]:
        common = self.fp32.action.keys() & self.int8.action.keys()
        return sorted(c for c in common if self.fp32.action[c] != self.int8.action[c])

    def decided(self) -> int:
        return len(self.fp32.action.keys() & self.int8.action.keys())


def _side(
    items: Sequence[LabelledCandidate],
    encoder: SentenceEncoder,
    settings: Settings,
    policy: Policy,
) -> Side:
    """The embedded ladder over `items` with `encoder`, and whole-response SGI."""
    candidates = [i.candidate for i in items]
    ctx = make_context(settings, policy)
    ctx.services["encoder"] = encoder  # the one measured, whatever the settings name
    side = Side()
    for record in run_lines(candidates, settings, policy, False, ctx=ctx).records:
        cid = str(record.get("candidate_id"))
        if record.get("stage") == "switch":
            side.action[cid] = str(record.get("action"))
        elif record.get("stage") == "geometry":
            evidence = record.get("evidence") or {}
            value = evidence.get("grounding_probability")
            if isinstance(value, float | int):
                side.probability[cid] = float(value)
    side.sgi = whole_response_sgi(candidates, encoder)
    return side


def _texts(items: Sequence[LabelledCandidate], encoder: SentenceEncoder, n: int) -> list[str]:
    """What the encoder is asked to embed for these candidates: questions, responses and
    context windows, the first `n`."""
    out: list[str] = []
    for item in items:
        c = item.candidate
        chunks = context_chunks(c.get("context")) or ()  # none: a no-source candidate
        for text in (c.get("question"), c.get("response"), *chunks):
            if isinstance(text, str) and text.strip():
                out += encoder.windows(text)
        if len(out) >= n:
            break
    return out[:n]


def raw_rates(encoders: Sequence[SentenceEncoder], texts: Sequence[str]) -> list[float]:
    """Texts per second of each encoder on `texts`, alternating in rounds after a warm-up."""
    for encoder in encoders:
        encoder.encode_uncached(texts[:32])
    spent = [0.0] * len(encoders)
    for _ in range(RATE_ROUNDS):
        for i, encoder in enumerate(encoders):
            started = time.perf_counter()
            encoder.encode_uncached(texts)
            spent[i] += time.perf_counter() - started
    return [RATE_ROUNDS * len(texts) / s for s in spent]


def static_graph(fp32: SentenceEncoder, calibration: Path, out_dir: Path) -> Path:
    """A static (QDQ) int8 graph of `fp32`'s model, ranges from `calibration`'s texts."""
    from pipeline.encoding.onnx_encoder import OnnxModel, export_onnx, kept_fp32
    from pipeline.encoding.quantize import quantize_static_int8

    source = export_onnx(fp32.model_path)
    texts = _texts(
        load_labelled(calibration, limit=CALIBRATION_RECORDS), fp32, 16 * CALIBRATION_RECORDS
    )
    model = OnnxModel(fp32.model_path, graph=source)
    feeds = [model.feed(texts[i : i + 16]) for i in range(0, len(texts), 16)]
    return quantize_static_int8(source, out_dir / "static.onnx", feeds, keep_fp32=kept_fp32(source))


def recipe_graph(fp32: SentenceEncoder, recipe: str, out_dir: Path) -> Path:
    """`fp32`'s model quantised by `recipe` into `out_dir` (not the backend's cache)."""
    from pipeline.encoding.onnx_encoder import export_onnx, quantize_int8

    return quantize_int8(export_onnx(fp32.model_path), out_dir / f"{recipe}.onnx", recipe)


@dataclass
class Comparison:
    files: list[FileResult]
    rates: tuple[float, float]
    method: str

    def verdict(self) -> tuple[bool, list[str]]:
        """Whether the bar holds, and one line per part of it."""
        diffs = np.concatenate([f.sgi_diffs() for f in self.files])
        worst = float(diffs.max()) if len(diffs) else 0.0
        lines = [f"SGI max |Δ| {worst:.4f} (bar {SGI_BAR})"]
        ok = worst <= SGI_BAR
        for kind in ("sgi", "p_grounded"):
            deltas = []
            for f in self.files:
                a, b = f.auroc_of(f.fp32, kind), f.auroc_of(f.int8, kind)
                if a is not None and b is not None:
                    deltas.append(abs(a - b))
            worst_auroc = max(deltas, default=0.0)
            ok = ok and worst_auroc <= AUROC_BAR
            lines.append(f"AUROC {kind} max |Δ| {worst_auroc:.4f} (bar {AUROC_BAR})")
        decided = sum(f.decided() for f in self.files)
        differ = sum(len(f.differing()) for f in self.files)
        same = 1 - differ / decided if decided else 1.0
        ok = ok and same >= DECISIONS_BAR
        lines.append(f"decisions identical {same:.2%} (bar {DECISIONS_BAR:.1%})")
        return ok, lines

    def report(self) -> list[str]:
        """The printed report; its last line is the verdict."""
        out = []
        for f in self.files:
            d = f.sgi_diffs()
            out.append(f"{f.name}: {len(f.labels)} candidates, {len(d)} with SGI")
            if len(d):
                out.append(
                    f"  |SGI int8 - fp32|: max {d.max():.4f}  p99 {np.quantile(d, 0.99):.4f}  "
                    f"mean {d.mean():.4f}  over {SGI_BAR}: {(d > SGI_BAR).mean():.1%}"
                )
            for kind, label in (("sgi", "SGI"), ("p_grounded", "P(grounded)")):
                a, b = f.auroc_of(f.fp32, kind), f.auroc_of(f.int8, kind)
                out.append(f"  AUROC {label}: fp32 {_fmt(a)}  int8 {_fmt(b)}")
            differing = f.differing()
            share = 1 - len(differing) / f.decided() if f.decided() else 1.0
            out.append(
                f"  switch action identical: {share:.2%} ({len(differing)} of {f.decided()} "
                f"differ){': ' + ', '.join(differing) if differing else ''}"
            )
        fp32_rate, int8_rate = self.rates
        out.append(
            f"raw texts/s: fp32 {fp32_rate:.1f}  int8 ({self.method}) {int8_rate:.1f}  "
            f"({int8_rate / fp32_rate:.2f}x)"
        )
        ok, parts = self.verdict()
        out.append(
            f"encoder compare ({self.method} int8): bar {'HOLDS' if ok else 'NOT met'}: "
            + "; ".join(parts)
        )
        return out


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def compare(
    data: Sequence[Path],
    settings: Settings,
    policy: Policy,
    *,
    limit: int | None = None,
    calibration: Path | None = None,
    recipe: str = "dynamic",
    say: Callable[[str], Any] = print,
) -> Comparison:
    """Both encoders over every file of `data`; see the module docstring. `recipe`: the
    int8 graph measured (`pipeline.encoding.onnx_encoder.INT8_RECIPES`), static with
    `calibration`."""
    if calibration is not None and any(calibration.resolve() == p.resolve() for p in data):
        raise CompareError(
            f"{calibration.name} is both calibration and measured data: calibrate on other texts"
        )
    if calibration is not None and recipe != "dynamic":
        raise CompareError(f"--calibrate makes a static graph: it does not go with {recipe}")
    sets = [(path.name, load_labelled(path, limit=limit)) for path in data]
    fp32 = SentenceEncoder(policy.encoder_model, backend="onnx")
    method = "static" if calibration is not None else recipe
    with tempfile.TemporaryDirectory(prefix="groundstream-int8-") as tmp:
        if calibration is not None:
            graph: Path | None = static_graph(fp32, calibration, Path(tmp))
        elif recipe == "dynamic":
            graph = None  # the backend's own graph, from the cache
        else:
            graph = recipe_graph(fp32, recipe, Path(tmp))
        int8 = SentenceEncoder(policy.encoder_model, backend="onnx-int8", graph=graph)
        files = []
        for name, items in sets:
            say(f"{name}: {len(items)} candidates, fp32 then int8 …")
            files.append(
                FileResult(
                    name,
                    {i.id: i.grounded for i in items},
                    _side(items, fp32, replace(settings, encoder_backend="onnx"), policy),
                    _side(items, int8, replace(settings, encoder_backend="onnx-int8"), policy),
                )
            )
        texts = [t for _, items in sets for t in _texts(items, fp32, RATE_TEXTS // len(sets))]
        fp32_rate, int8_rate = raw_rates([fp32, int8], texts)
    return Comparison(files, (fp32_rate, int8_rate), method)
