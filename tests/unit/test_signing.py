"""Envelope signatures (issue 9, item 7): only a holder of the stage key can write an
envelope an inner topic accepts, and only for the topic it was signed for."""

from __future__ import annotations

from topics.signing import SIGNATURE_HEADER, signed, verify

KEY = b"stage-secret"
VALUE = b'{"human": {"verdict": "accept"}}'


def test_a_signed_envelope_verifies():
    headers = signed(KEY, "rules", VALUE, (("traceparent", b"00-abc"),))
    assert headers[0] == ("traceparent", b"00-abc")
    assert verify(KEY, "rules", VALUE, headers) is None


def test_unsigned_forged_and_replayed_envelopes_do_not():
    headers = signed(KEY, "scored", VALUE)
    assert verify(KEY, "rules", VALUE, ()) == "unsigned envelope on an inner topic"
    assert verify(KEY, "rules", VALUE, headers) == "envelope signature does not verify"
    assert verify(KEY, "scored", VALUE + b" ", headers) == "envelope signature does not verify"
    assert verify(b"guessed", "scored", VALUE, headers) == "envelope signature does not verify"
    assert verify(KEY, "scored", None, headers) == "envelope signature does not verify"
    twice = (*headers, *signed(b"other", "scored", VALUE))
    assert verify(KEY, "scored", VALUE, twice) == "more than one envelope signature"


def test_signing_replaces_an_old_signature_and_no_key_signs_nothing():
    first = signed(KEY, "scored", VALUE)
    again = signed(KEY, "judge", VALUE, first)
    assert [k for k, _ in again].count(SIGNATURE_HEADER) == 1
    assert verify(KEY, "judge", VALUE, again) is None
    assert signed(None, "judge", VALUE, first) == ()
