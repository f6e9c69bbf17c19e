"""The shipped claim-support head, with the real encoder, offline: it reads what a claim says.

Fixtures are the project's own sentences. A correct paraphrase of a context sentence must
score well above the same sentence with a name, number or negation changed.
"""

from __future__ import annotations

import socket

import pytest

from workers.clients.claims import DEFAULT_HEAD_DIR, head_metadata, load_scorer

pytestmark = pytest.mark.integration  # loads the real encoder

AUSTRALIA = "Canberra is the capital city of Australia. Sydney is its largest city."
COMPANY = (
    "Larkspur Tools was founded in 1987 by Jane Doe. The company makes hand tools in Leeds. "
    "It employs about 300 people."
)


@pytest.fixture
def offline(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("network connection attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize(
    ("context", "paraphrase", "changed"),
    [
        (AUSTRALIA, "The capital of Australia is Canberra.", "The capital of Australia is Sydney."),
        (COMPANY, "It was founded by Jane Doe in 1987.", "It was founded by Jane Doe in 1991."),
        (COMPANY, "Jane Doe founded Larkspur Tools.", "John Smith founded Larkspur Tools."),
        (COMPANY, "About 300 people work there.", "About 3,000 people work there."),
    ],
)
def test_a_paraphrase_scores_above_its_changed_version(
    offline, context: str, paraphrase: str, changed: str
) -> None:
    scorer = load_scorer()
    right = scorer.assess(paraphrase, context).score
    wrong = scorer.assess(changed, context).score
    assert right - wrong > 0.3, (right, wrong)


def test_the_weakest_claim_and_its_window_are_named(offline) -> None:
    got = load_scorer().assess(
        "Larkspur Tools makes hand tools. It was founded in 1991 by Jane Doe.", COMPANY
    )
    assert got.weakest is not None and "1991" in got.weakest.text
    assert got.window is not None  # the passage the reviewer is shown beside it
    assert got.claim_scores[0] > got.score


def test_the_artefact_records_how_it_was_made() -> None:
    meta = head_metadata()
    assert set(meta["data_sha256"]) >= {"ragtruth_dev.jsonl", "begin_dev.jsonl"}
    assert meta["seed"] == 0 and "cv" in meta
    size = sum(p.stat().st_size for p in DEFAULT_HEAD_DIR.iterdir())
    assert size < 50 * 1024 * 1024
