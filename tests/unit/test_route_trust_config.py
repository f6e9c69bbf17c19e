"""The route settings of issue 9 (items 4 and 7): which context sources ground an answer,
how many distinct samples consistency needs, and who may ask for the route."""

from __future__ import annotations

import pytest

from pipeline.errors import PolicyError
from pipeline.guards.provenance import Source
from pipeline.policy.routing import RouteConfig


def test_defaults():
    route = RouteConfig.from_mapping("default", {})
    assert route.grounding_sources == {Source.RETRIEVAL, Source.TOOL}
    assert route.min_distinct_samples == 2
    assert route.allowed_initiators == {"user", "agent"}


def test_values_are_read():
    route = RouteConfig.from_mapping(
        "r",
        {
            "grounding_sources": ["retrieval", "history"],
            "min_distinct_samples": 4,
            "allowed_initiators": ["user"],
        },
    )
    assert route.grounding_sources == {Source.RETRIEVAL, Source.HISTORY}
    assert (route.min_distinct_samples, route.allowed_initiators) == (4, {"user"})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("grounding_sources", ["web"], "routes.r.grounding_sources"),
        ("grounding_sources", "retrieval", "routes.r.grounding_sources"),
        ("min_distinct_samples", 0, "routes.r.min_distinct_samples"),
        ("allowed_initiators", ["robot"], "routes.r.allowed_initiators"),
        ("allowed_initiators", [], "routes.r.allowed_initiators"),
    ],
)
def test_bad_values_name_the_setting(key, value, message):
    with pytest.raises(PolicyError, match=message):
        RouteConfig.from_mapping("r", {key: value})


def test_the_wire_names_agree_with_the_core():
    from pipeline.policy.routing import Mode
    from topics.schema import MODES, SOURCES

    assert set(MODES) == {m.value for m in Mode}
    assert set(SOURCES) == {s.value for s in Source}


def test_an_envelope_with_an_unknown_mode_is_malformed():
    # Found by tests/faults/test_fuzz_stages.py: it parsed, then the judge raised on it.
    from topics.codec import dumps
    from topics.schema import MalformedMessage, parse_envelope

    candidate = {"id": "c", "session_id": "s", "question": "q", "response": "r"}
    body = {"schema_version": 1, "candidate": candidate, "route": "default", "mode": "x"}
    with pytest.raises(MalformedMessage, match="envelope mode must be one of off, shadow"):
        parse_envelope(dumps(body))
