"""Bounded work per candidate at the consistency stage (issue 33, item 5): the samples a
candidate brings are capped like the other work caps, decided by a pure function before
any is read, from settings validated at start-up."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pipeline.errors import PolicyError
from pipeline.guards.admission import WorkCaps, admit_samples
from pipeline.policy.document import load_policy
from pipeline.stages import consistency
from tests.fixtures.fakes import FakeEncoder
from topics.codec import loads
from topics.conclusion import read_conclusion
from topics.names import Topic
from topics.schema import Candidate, Envelope, candidate_from_dict
from workers.interfaces import EndpointConfig, StageContext
from workers.runtime.settings import Settings, SettingsError
from workers.stages.consistency import ConsistencyStage

NOW = 1_700_000_000.0
POLICY = load_policy(None)
RESPONSE = "They are kept for 90 days."
SAMPLES = ("Ninety days.", "Kept 90 days, then purged.", "Files stay 90 days.")
CAPS = WorkCaps(samples=3, sample_words=5)  # exactly what SAMPLES measure


class _NoEncoder:
    """An encoder that must not be called."""

    def encode(self, texts: object) -> object:
        raise AssertionError("compared samples over the work cap")


def candidate(samples: tuple[str, ...]) -> Candidate:
    return candidate_from_dict(
        {
            "id": "c1",
            "session_id": "s1",
            "question": "How long are deleted files kept?",
            "context": "Deleted files are kept for 90 days.",
            "response": RESPONSE,
            "samples": list(samples),
        }
    )


def run(c: Candidate, encoder: object) -> tuple[dict, str]:
    """The stage's decision record for `c` under `CAPS`, and the topic it went to."""
    ctx = StageContext(policy=POLICY, clock=lambda: NOW, caps=CAPS, services={"encoder": encoder})
    env = Envelope(candidate=c, route="default", mode="active")
    emits = asyncio.run(ConsistencyStage(EndpointConfig()).decide_one(env, ctx))
    record = next(loads(e.value) for e in emits if e.topic is Topic.DECISIONS)
    sent = next(e for e in emits if e.topic is not Topic.DECISIONS)
    if sent.topic is Topic.CONCLUDED:
        return record, read_conclusion(sent.value, sent.headers).topic
    return record, sent.topic.value


OVER = [
    pytest.param(
        (*SAMPLES, SAMPLES[0]),  # a copy counts: collapsing copies is work too
        "over the work cap: samples 4 over the cap of 3",
        {"samples": 4, "sample_words": 5},
        id="count",
    ),
    pytest.param(
        (SAMPLES[0], "Kept for ninety days, then purged."),
        "over the work cap: sample_words 6 over the cap of 5",
        {"samples": 2, "sample_words": 6},
        id="oversize",
    ),
]


@pytest.mark.parametrize(("samples", "reason", "counts"), OVER)
def test_over_a_cap_the_pure_rule_holds_for_a_person(
    samples: tuple[str, ...], reason: str, counts: dict[str, int]
) -> None:
    verdict = consistency.screen(candidate(samples), CAPS)
    assert verdict is not None
    assert (verdict.routing, verdict.action, verdict.gate) == ("hold", "escalate", "work_cap")
    assert verdict.reason == reason
    assert verdict.evidence == {
        "sample_source": "candidate",
        "admission": {"admitted": False, "reason": reason, **counts},
    }


@pytest.mark.parametrize(("samples", "reason", "counts"), OVER)
def test_over_a_cap_the_worker_records_it_and_sends_it_to_review_unread(
    samples: tuple[str, ...], reason: str, counts: dict[str, int]
) -> None:
    c = candidate(samples)
    record, topic = run(c, _NoEncoder())
    verdict = consistency.screen(c, CAPS)
    assert verdict is not None
    assert (record["action"], record["gate"], record["reason"]) == ("escalate", "work_cap", reason)
    assert record["evidence"] == dict(verdict.evidence or {})
    assert {k: record["evidence"]["admission"][k] for k in counts} == counts
    assert topic == Topic.REVIEW.value


def test_within_the_caps_the_candidate_decides_as_before() -> None:
    c = candidate(SAMPLES)
    assert admit_samples(SAMPLES, CAPS).admitted  # at each cap exactly
    assert consistency.screen(c, CAPS) is None
    encoder = FakeEncoder(
        {
            RESPONSE: [1.0, 0.0, 0.0],
            SAMPLES[0]: [0.9, 0.1, 0.0],
            SAMPLES[1]: [0.95, 0.05, 0.0],
            SAMPLES[2]: [0.97, 0.03, 0.0],
        }
    )
    record, topic = run(c, encoder)
    own = consistency.supplied(c, POLICY.route("default"))
    texts = [c.response, *consistency.samples_of(own, None)]
    sim = consistency.similarities(np.asarray(encoder.encode(texts)))
    verdict = consistency.decide(own, None, sim, POLICY.consistency, nli=False)
    assert (record["action"], record["reason"], record.get("gate")) == (
        verdict.action,
        verdict.reason,
        verdict.gate,
    )
    assert record.get("gate") != "work_cap"
    assert topic == Topic.RULES.value  # committed, and the response agrees


@pytest.mark.parametrize(
    ("variable", "attribute"),
    [("GROUNDSTREAM_MAX_SAMPLES", "samples"), ("GROUNDSTREAM_MAX_SAMPLE_WORDS", "sample_words")],
)
@pytest.mark.parametrize("bad", ["0", "-3", "many", "2.5"])
def test_settings_build_the_caps_and_refuse_a_bad_value(
    variable: str, attribute: str, bad: str
) -> None:
    assert getattr(Settings.from_env({variable: "7"}).work_caps(), attribute) == 7
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: bad})
    with pytest.raises(PolicyError, match=f"caps.{attribute}"):
        WorkCaps(**{attribute: 0})  # type: ignore[arg-type]
