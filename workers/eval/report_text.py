"""The eval summary as a few aligned lines for a terminal."""

from __future__ import annotations

from typing import Any


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:5.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


_SCORES = (
    ("sgi", "SGI"),
    ("core_sgi", "core SGI"),
    ("dgi", "DGI"),
    ("grounding_probability", "P(grounded)"),
    ("claim_support", "weakest claim"),
)


def _auroc(m: dict[str, Any], name: str, label: str) -> str:
    plain, matched = m.get(f"auroc_{name}"), m.get(f"length_matched_auroc_{name}")
    return f"{label} {_num(plain)} (length-matched {_num(matched)})"


def render_summary(m: dict[str, Any]) -> str:
    lines = [
        f"data {m.get('data')}  policy {m.get('policy_version')}  n={m['n']} "
        f"(grounded {m['n_grounded']}, ungrounded {m['n_ungrounded']})",
        "AUROC  " + "  ".join(_auroc(m, name, label) for name, label in _SCORES),
        f"grounded answers reaching state   {_pct(m.get('grounded_to_state'))}"
        f"   length-matched {_pct(m.get('grounded_to_state_length_matched'))}",
        f"ungrounded share of state         {_pct(m.get('state_ungrounded_share'))}"
        f"   length-matched {_pct(m.get('state_ungrounded_share_length_matched'))}",
        f"escalation rate                   {_pct(m.get('escalation_rate'))}",
        f"judge calls                       {m.get('judge_calls', 0)}",
        f"outside the model's fitted range  {_pct(m.get('out_of_range_share'))}"
        f"   of grounded {_pct(m.get('grounded_out_of_range_share'))}",
        f"throughput                        {m.get('throughput_per_second') or 0:.1f} candidates/s",
    ]
    if m.get("reader"):
        r = m["reader"]
        lines.append(
            f"reader {r['name']}: answers (n={r['n_answers']}) AUROC head "
            f"{_num(r['auroc_answers_head'])}, reader {_num(r['auroc_answers_reader'])};"
            f" claims (n={r['n_claims']}) head {_num(r['auroc_claims_head'])},"
            f" reader {_num(r['auroc_claims_reader'])}"
        )
    for kind, f in m.get("by_task", {}).items():
        lines.append(
            f"  task {kind:<10} n={f['n']:<5} grounded to state {_pct(f['grounded_to_state'])}"
            f"   ungrounded share of state {_pct(f['state_ungrounded_share'])}"
        )
    for label, counts in m.get("outcomes", {}).items():
        mix = ", ".join(f"{topic}={n}" for topic, n in counts.items() if n)
        lines.append(f"{label:>11}: {mix}")
    return "\n".join(lines)
