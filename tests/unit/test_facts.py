"""Flagged numbers and names that are no claim (pipeline.claims.facts), and what they do in rules:
held by geometry as before, no longer a hard fact under a judge's or a person's accept."""

from __future__ import annotations

import pytest

from pipeline.bounds.authority import Authority
from pipeline.claims.facts import is_artefact
from pipeline.claims.support import measure_support
from pipeline.rungs.rule_checks import RuleInput, RulesAction, RulesConfig, evaluate_rules


def flagged(response: str, context: str, question: str = "") -> dict[str, bool]:
    """Every flagged span of `response` → whether it is an artefact."""
    report = measure_support(response, [context], question)
    spans = [("number", s) for s in report.unsupported_numbers]
    spans += [("name", s) for s in report.unsupported_names]
    return {s.text: is_artefact(s, kind, response, [context], question) for kind, s in spans}


@pytest.mark.parametrize(
    ("response", "context", "artefact"),
    [
        ("Steps:\n3. Light the grill.\n4. Flip the ribs.", "Light the grill, flip the ribs.", "4"),
        ("It opens at 9:00 PM daily.", '{"hours": {"Monday": "17:0-21:0"}}', "9"),
        ("It opens from 5 PM.", '{"hours": {"Monday": "17:0-21:0"}}', "5"),
        ("Here is a summary in 200 words:\nThe park is free.", "The park is free.", "200"),
        ("They offer free Wi-Fi and coffee.", '{"wifi": "free", "coffee": true}', "Wi"),
        ("It is in Goleta, California.", '{"city": "Goleta", "state": "CA"}', "California"),
        ("He wants to leave the EU soon.", "Membership of the European Union.", "EU"),
        ("Parks are free during the week (Apr. 18-26).", "from April 18 to 26", "Apr"),
        ("A Chinese cyclist rode on.", "He cycled around China for 460 days.", "Chinese"),
        ("1. Check the French White Pages online.", "Use the French White Pages.", "Check"),
    ],
)
def test_no_claim_of_its_own(response: str, context: str, artefact: str) -> None:
    found = flagged(response, context)
    key = next(k for k in found if k.startswith(artefact))
    assert found[key] is True


@pytest.mark.parametrize(
    ("response", "context"),
    [
        ("The jury had 12 members.", "The jury deliberated for two days."),
        ("It was founded in 1987 by Jane Doe.", "It was founded in 1978."),
        ("The treaty was signed by Walter Griffin.", "The treaty was signed in Paris."),
        ("It opens at 9:00 PM daily.", '{"hours": {"Monday": "17:0-20:0"}}'),
        ("Prices rose 4. Then they fell.", "Prices rose, then fell."),
    ],
)
def test_claims_stay_hard_facts(response: str, context: str) -> None:
    found = flagged(response, context)
    assert found and not any(found.values())


def test_an_artefact_holds_geometry_but_not_a_judge() -> None:
    inp = RuleInput(
        "",
        ('{"city": "Goleta", "state": "CA", "name": "Cafe Luna"}',),
        "Cafe Luna is in Goleta, California.",
    )
    assert evaluate_rules(inp, RulesConfig(), Authority.GEOMETRY).action is RulesAction.REVIEW
    judged = evaluate_rules(inp, RulesConfig(), Authority.JUDGE)
    assert judged.action is RulesAction.PASS
    assert [f.span.text for f in judged.findings if f.span] == ["California"]
