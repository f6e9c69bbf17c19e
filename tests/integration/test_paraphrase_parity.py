"""Phrasing does not decide: an answer framed the way an assistant writes it gets the action
of the same answer copied from the source.

With the real encoder, the shipped claim head and the shipped policy (what a library user
gets from `pipeline.score_candidate` and `pipeline.GroundingSwitch`), each fixture is a
context, a sentence copied from it, the same fact in an assistant's framing (the question
restated, a lead-in), and a wrong answer that stays on topic and reuses the source's
words. The gate must give the copy and the framed answer the same action, and never
accept a wrong one. A paraphrase that reorders the source's clauses ("founded by Jane Doe
in 1987" for "founded in 1987 by Jane Doe") is not yet read alike (docs/explanation/limitations.md);
the wrong twins of those fixtures are still checked. Fixtures are the
project's own sentences.
"""

from __future__ import annotations

import pytest

import pipeline

pytestmark = pytest.mark.integration  # loads the real encoder

AUSTRALIA = "Canberra is the capital city of Australia. Sydney is its largest city."
COMPANY = "The company was founded in 1987 by Jane Doe."
BRIDGE = (
    "The Harlow footbridge opened in 2004. It spans the River Tame and is 120 metres long. "
    "It was designed by the engineer Priya Nair."
)
LIBRARY = (
    "The Elm Street library lends books to residents for three weeks. "
    "Late returns are charged 20 pence a day. The library is closed on Sundays."
)

FRAMED = [
    (
        AUSTRALIA,
        "What is the capital of Australia?",
        "Canberra is the capital city of Australia.",
        "The capital of Australia is Canberra.",
        "The capital of Australia is Sydney, its largest city.",
    ),
    (
        BRIDGE,
        "Who designed the Harlow footbridge?",
        "It was designed by the engineer Priya Nair.",
        "Based on the passage, it was designed by the engineer Priya Nair.",
        "It was designed by the engineer Tom Hale.",
    ),
    (
        LIBRARY,
        "On which day is the library closed?",
        "The library is closed on Sundays.",
        "Based on the passage, the library is closed on Sundays.",
        "The library is closed on Mondays.",
    ),
]


REORDERED = [
    (
        COMPANY,
        "When was the company founded, and by whom?",
        "The company was founded in 1987 by Jane Doe.",
        "It was founded by Jane Doe in 1987.",
        "It was founded by Jane Doe in 1978.",
    ),
    (
        BRIDGE,
        "Who designed the Harlow footbridge?",
        "It was designed by the engineer Priya Nair.",
        "The engineer Priya Nair designed the Harlow footbridge.",
        "The engineer Tom Hale designed the Harlow footbridge.",
    ),
]


def _action(context: str, question: str, answer: str) -> str:
    score = pipeline.score_candidate(question, answer, context)
    return pipeline.GroundingSwitch().decide(score).action.value


@pytest.mark.parametrize(("context", "question", "verbatim", "framed", "wrong"), FRAMED)
def test_a_framed_answer_gets_the_verbatim_action(context, question, verbatim, framed, wrong):
    assert _action(context, question, verbatim) == "accept"
    assert _action(context, question, framed) == "accept"


@pytest.mark.parametrize(
    ("context", "question", "verbatim", "paraphrase", "wrong"), FRAMED + REORDERED
)
def test_wrong_answer_never_accepts(context, question, verbatim, paraphrase, wrong):
    assert _action(context, question, wrong) != "accept"


@pytest.mark.parametrize(("context", "question", "verbatim", "reordered", "wrong"), REORDERED)
def test_a_reordered_paraphrase_is_not_read_as_wrong(context, question, verbatim, reordered, wrong):
    """Not yet given the verbatim action (docs/explanation/limitations.md), but kept well clear of
    the wrong answers' scores (all under 0.01 today, the paraphrases about 0.47). A refit
    that learns word order as evidence against an answer fails here: order-free phrase
    support, refitted with negative weights, drove "It was founded by Jane Doe in 1987." to
    0.03 while the assistant-phrasing figures looked better than ever (reverted 2026-12-01)."""
    assert pipeline.score_candidate(question, reordered, context).value >= 0.25
    assert pipeline.score_candidate(question, wrong, context).value < 0.05
