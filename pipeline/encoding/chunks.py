"""A candidate's context as its chunks: the one rule every stage, fit and bench reads it by.

The wire allows a context as one string or as a list of strings (one per retrieved chunk);
everything downstream works on a tuple of chunks. A bare string is one chunk, never a
sequence of characters.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.errors import ScoringError


def context_chunks(context: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """``None`` for no context; otherwise the chunks, a plain string being one chunk.

    A chunk that is not a string is refused (`ScoringError` naming its index) rather than
    converted: a number or an object in a context is a caller's bug, not a source.
    """
    if context is None:
        return None
    if isinstance(context, str):
        return (context,)
    if isinstance(context, (bytes, dict)) or not isinstance(context, Iterable):
        raise ScoringError(
            "context must be a string or a sequence of strings (one per chunk), "
            f"got {type(context).__name__}"
        )
    chunks = tuple(context)
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, str):
            raise ScoringError(f"context[{i}] must be a string, got {type(chunk).__name__}")
    return chunks
