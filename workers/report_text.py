"""The eval summary as a few aligned lines for a terminal."""

from __future__ import annotations

from typing import Any


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:5.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def render_summary(m: dict[str, Any]) -> str:
    lines = [
        f"data {m.get('data')}  policy {m.get('policy_version')}  n={m['n']} "
        f"(grounded {m['n_grounded']}, ungrounded {m['n_ungrounded']})",
        f"AUROC  SGI {_num(m.get('auroc_sgi'))} (length-matched {_num(m.get('length_matched_auroc_sgi'))})"
        f"  DGI {_num(m.get('auroc_dgi'))} (length-matched {_num(m.get('length_matched_auroc_dgi'))})"
        f"  P(grounded) {_num(m.get('auroc_grounding_probability'))}"
        f" (length-matched {_num(m.get('length_matched_auroc_grounding_probability'))})",
        f"grounded answers reaching state   {_pct(m.get('grounded_to_state'))}"
        f"   length-matched {_pct(m.get('grounded_to_state_length_matched'))}",
        f"ungrounded share of state         {_pct(m.get('state_ungrounded_share'))}"
        f"   length-matched {_pct(m.get('state_ungrounded_share_length_matched'))}",
        f"escalation rate                   {_pct(m.get('escalation_rate'))}",
        f"throughput                        {m.get('throughput_per_second') or 0:.1f} candidates/s",
    ]
    for label, counts in m.get("outcomes", {}).items():
        mix = ", ".join(f"{topic}={n}" for topic, n in counts.items() if n)
        lines.append(f"{label:>11}: {mix}")
    return "\n".join(lines)
