"""`bench plot`: each bench's latest figure against its goal, and every worker's peak memory."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import DataFileError
from topics.codec import loads
from workers.bench.procs import MIB
from workers.bench.report import memory_goal


def latest(paths: list[Path]) -> dict[str, dict]:
    """The last result of each bench across the JSON-lines files."""
    out: dict[str, dict] = {}
    for path in paths:
        for n, line in enumerate(path.read_bytes().splitlines(), start=1):
            if line.strip():
                try:
                    record = loads(line)
                    out[record["bench"]] = record
                except (ValueError, KeyError, TypeError) as exc:
                    raise DataFileError(
                        f"{path}:{n}: not a bench result ({type(exc).__name__}: {exc})"
                    ) from None
    return out


def plot_results(paths: list[Path], out: Path) -> None:
    # The files first: a malformed one is the user's error, one line, before matplotlib's
    # import can say anything of its own (its first run builds a font cache, and says so).
    results = latest(paths)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = sorted(results)
    # Figure over goal: >= 1 meets it (latency's goal is a ceiling, so goal over figure).
    shares = []
    for name in names:
        r = results[name]
        goal, figure = r["goal"], r["figure"]
        if goal is None:
            shares.append(figure)
        else:
            shares.append(goal / figure if r["lower_is_better"] else figure / goal)
    colours = [
        "#888888" if results[n]["goal"] is None else "#2a9d8f" if s >= 1 else "#e76f51"
        for n, s in zip(names, shares, strict=True)
    ]
    left.barh(names, shares, color=colours)
    left.axvline(1.0, color="black", linewidth=1)
    left.set_xlabel("figure / goal (>= 1 meets it; grey: no goal, the figure itself)")
    for y, name in enumerate(names):
        r = results[name]
        figure = f"{r['figure']:,.0f}" if r["unit"] == "ms" else f"{r['figure']:.2f}"
        left.text(shares[y], y, f" {figure}{r['unit']}", va="center", fontsize=8)
    left.set_title("Benches against their goals")
    peaks: dict[str, int] = {}
    for r in results.values():
        for process, peak in r["peaks"].items():
            peaks[process] = max(peak, peaks.get(process, 0))
    procs = sorted(peaks)
    right.barh(procs, [peaks[p] / MIB for p in procs], color="#457b9d")
    for y, p in enumerate(procs):
        right.plot([memory_goal(p) / MIB] * 2, [y - 0.4, y + 0.4], color="black")
    right.set_xlabel("peak resident MiB (VmHWM); black tick: the goal")
    right.set_title("Worker memory")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
