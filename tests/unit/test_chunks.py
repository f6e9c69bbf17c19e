"""The one rule for reading a context as chunks (pipeline.encoding.chunks)."""

from __future__ import annotations

import pytest

from pipeline.encoding.chunks import context_chunks
from pipeline.errors import ScoringError


def test_none_is_no_context() -> None:
    assert context_chunks(None) is None


def test_a_string_is_one_chunk_not_its_characters() -> None:
    assert context_chunks("Porto lies on the Douro.") == ("Porto lies on the Douro.",)


def test_a_list_keeps_its_chunks_in_order() -> None:
    assert context_chunks(["a", "", "b"]) == ("a", "", "b")
    assert context_chunks(iter(["x"])) == ("x",)


@pytest.mark.parametrize(
    ("context", "named"),
    [(["ok", 3], r"context\[1\]"), ([None], r"context\[0\]"), (31, "int"), ({"a": "b"}, "dict")],
)
def test_anything_else_is_refused_with_what_it_was(context: object, named: str) -> None:
    with pytest.raises(ScoringError, match=named):
        context_chunks(context)  # type: ignore[arg-type]
