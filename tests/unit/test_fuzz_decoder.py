"""Property-based fuzzing of the decoder: whatever bytes arrive, `loads` returns a value
that encodes again or raises a ValueError, and the schema parsers return a value or raise
`MalformedMessage` with a reason; depth and size limits hold at parse time (issue 9,
item 3)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topics.codec import MAX_DEPTH, DecodeLimitError, dumps, loads, nesting_depth
from topics.schema import MalformedMessage, parse_candidate, parse_envelope

GOOD = {
    "id": "c-1",
    "session_id": "s-1",
    "question": "What is the capital of France?",
    "response": "Paris.",
    "context": ["Paris is the capital of France."],
}

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def encodes_again(value: object) -> bool:
    return orjson.loads(dumps(value)) == value


class TestLimits:
    def test_depth_at_the_limit_parses_and_encodes(self):
        value = loads(nested(MAX_DEPTH))
        assert nesting_depth(value) == MAX_DEPTH
        assert encodes_again(value)

    def test_one_level_deeper_is_refused(self):
        with pytest.raises(DecodeLimitError, match="nesting deeper than 64"):
            loads(nested(MAX_DEPTH + 1))

    def test_metadata_300_deep_is_malformed_at_parse_time(self):
        # It used to parse, then fail to encode at send time (orjson encodes 254 levels).
        raw = dumps({**GOOD, "metadata": {"x": 1}})
        raw = raw.replace(b'{"x":1}', b'{"x":' + nested(300) + b"}")
        with pytest.raises(MalformedMessage, match="nesting deeper"):
            parse_candidate(raw)

    def test_100000_deep_json_is_a_value_error_not_a_recursion_error(self):
        with pytest.raises(ValueError):
            loads(nested(100_000))

    def test_size_cap(self):
        with pytest.raises(DecodeLimitError, match="oversize"):
            loads(b"[" + b"1," * 100 + b"1]", max_bytes=100)
        assert loads(b"[1]", max_bytes=3) == [1]

    @pytest.mark.parametrize("raw", [b"1" * 400, b"-" + b"9" * 400, b"1e400", b"NaN", b"-Infinity"])
    def test_out_of_range_numbers_are_refused(self, raw):
        with pytest.raises(ValueError):
            loads(raw)


class TestFuzz:
    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.binary(max_size=300))
    def test_any_bytes_parse_or_raise_value_error(self, raw):
        try:
            value = loads(raw)
        except ValueError:
            return
        assert encodes_again(value)

    @settings(max_examples=400, deadline=None)
    @given(st.binary(max_size=300))
    def test_any_bytes_are_a_candidate_or_malformed(self, raw):
        for parse in (parse_candidate, parse_envelope):
            try:
                parse(raw)
            except MalformedMessage as exc:
                assert exc.reason

    @settings(max_examples=400, deadline=None)
    @given(
        st.sampled_from([*sorted(GOOD), "turn", "samples", "deadline", "route", "metadata"]),
        json_values,
    )
    def test_one_field_replaced_by_any_json(self, field, value):
        raw = dumps({**GOOD, field: value})
        try:
            candidate = parse_candidate(raw)
        except MalformedMessage as exc:
            assert exc.reason
            return
        again = parse_candidate(dumps(candidate.to_dict()))
        assert again == candidate

    @settings(max_examples=200, deadline=None)
    @given(
        st.integers(min_value=0, max_value=len(dumps(GOOD)) - 1), st.binary(min_size=1, max_size=4)
    )
    def test_corrupted_good_message(self, at, junk):
        raw = dumps(GOOD)
        corrupted = raw[:at] + junk + raw[at + len(junk) :]
        try:
            parse_candidate(corrupted)
        except MalformedMessage as exc:
            assert exc.reason
