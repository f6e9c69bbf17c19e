"""A cache for functions of text, bounded by the characters it holds rather than by entries.

The lexical measures and the encoder's windows are recomputed for the same texts many
times per stage batch (every claim against the same windows, every candidate of a session
against the same source), so they are cached. An entry's memory grows with its text (a
token tuple is some tens of bytes per character), so a bound on the number of entries is
no bound at all: a few thousand unique 1 MB contexts would pin gigabytes. This cache
evicts by total characters, and does not keep a text larger than a fraction of its budget.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

R = TypeVar("R")
Key = str | tuple[str, ...]

DEFAULT_BUDGET_CHARS = 2_000_000
"""About a stage batch of RAG answers: 64 contexts of 5,000 characters, with their windows
and statements, several times over."""


def chars(key: Key) -> int:
    return len(key) if isinstance(key, str) else sum(map(len, key))


class TextMemo(Generic[R]):
    """`fn(key)` remembered while the keys held total at most `budget` characters, least
    recently used out first. Thread-safe: the consistency stage scores from several threads."""

    def __init__(self, fn: Callable[[Key], R], budget: int = DEFAULT_BUDGET_CHARS) -> None:
        self.fn = fn
        self.budget = budget
        self.largest = budget // 16
        self._entries: OrderedDict[Key, R] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __call__(self, key: Key) -> R:
        # A hit takes no lock: each dict operation is atomic, and an entry another thread
        # evicts between the two is simply not refreshed.
        try:
            value = self._entries[key]
        except KeyError:
            pass
        else:
            with contextlib.suppress(KeyError):
                self._entries.move_to_end(key)
            return value
        value = self.fn(key)
        size = chars(key)
        if size > self.largest:
            return value
        with self._lock:
            if key not in self._entries:
                self._entries[key] = value
                self._held += size
                while self._held > self.budget:
                    old, _ = self._entries.popitem(last=False)
                    self._held -= chars(old)
        return value

    def cache_clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._held = 0

    @property
    def held_chars(self) -> int:
        return self._held

    def __len__(self) -> int:
        return len(self._entries)


def text_memo(budget: int = DEFAULT_BUDGET_CHARS) -> Callable[[Callable[..., R]], TextMemo[R]]:
    """Decorator form of `TextMemo`."""

    def wrap(fn: Callable[..., R]) -> TextMemo[R]:
        return TextMemo(fn, budget)

    return wrap
