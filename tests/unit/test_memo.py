"""The text caches are bounded by the characters they hold, not by their entry count."""

from __future__ import annotations

import threading

from pipeline.claims import support
from pipeline.encoding.memo import TextMemo


def test_evicts_least_recently_used_by_characters_held() -> None:
    calls: list[str] = []

    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    memo = TextMemo(upper, budget=160)  # a single entry of at most 10 characters is kept
    for text in ("a" * 10, "b" * 10, "c" * 10):
        assert memo(text) == text.upper()
    assert memo("a" * 10) == "A" * 10 and calls.count("a" * 10) == 1  # held, and now newest
    for i in range(14):
        memo(str(i).rjust(10, "x"))
    assert memo.held_chars <= 160
    memo("b" * 10)  # the oldest: evicted, so computed again
    assert calls.count("b" * 10) == 2


def test_a_text_over_a_sixteenth_of_the_budget_is_computed_but_never_kept() -> None:
    memo = TextMemo(len, budget=1600)
    assert memo("x" * 101) == 101
    assert len(memo) == 0 and memo.held_chars == 0
    assert memo(("x" * 50, "y" * 50)) == 2  # a tuple of texts counts all its characters
    assert len(memo) == 1 and memo.held_chars == 100


def test_concurrent_callers_agree_and_stay_within_budget() -> None:
    memo = TextMemo(lambda t: t[::-1], budget=2000)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(2000):
                text = f"{(seed * i) % 97:05d}-text"
                assert memo(text) == text[::-1]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and memo.held_chars <= 2000


def test_a_megabyte_word_is_stemmed_but_not_cached() -> None:
    before = support._stem_cached.cache_info().currsize
    word = "b" * 1_000_000 + "ing"
    assert support.stem(word) == "b" * 999_999  # -ing dropped, the doubled b undone
    assert support._stem_cached.cache_info().currsize == before
    assert support.stem("running") == "run"


def test_cached_support_reads_the_same_as_a_first_reading() -> None:
    context = ("Canberra is the capital of Australia. Sydney is its largest city.",)
    first = support.measure_support("The capital is Canberra, not Sydney.", context)
    support._tokens.cache_clear()
    support._sentences.cache_clear()
    support._context_index.cache_clear()
    again = support.measure_support("The capital is Canberra, not Sydney.", context)
    assert first == again
    perth = support.measure_support("Perth is the capital.", context)
    assert [w.text for w in perth.unsupported_words] == ["Perth"]
