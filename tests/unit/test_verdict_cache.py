"""The verdict cache, pure (`pipeline.judge.verdict_cache`): a key that moves with every input
the judge reads, the TTL at its edge, and only clear verdicts kept."""

from __future__ import annotations

import pytest

from pipeline.errors import PolicyError
from pipeline.judge.question import JudgeConfig, JudgeReadout, JudgeStatus
from pipeline.judge.verdict_cache import (
    DEFAULT_TTL_S,
    PROMPT_VERSION,
    CachedVerdict,
    cache_key,
    cacheable,
    check_ttl,
    evictions,
    readout_from_dict,
)
from pipeline.policy.document import parse_policy

BASE = {
    "question": "When was the bridge opened?",
    "evidence": ["The bridge opened in 1932.", "It is 503 m long."],
    "response": "It opened in 1932.",
    "model": "judge-8b",
    "top_logprobs": 5,
    "prompt_version": PROMPT_VERSION,
}


def key(**change) -> str:
    return cache_key(**{**BASE, **change})


def readout(score: float, status: JudgeStatus = JudgeStatus.OK) -> JudgeReadout:
    return JudgeReadout(status, score, score, 1 - score, (("Yes", -0.1), ("No", -2.0)), "m")


class TestKey:
    def test_the_same_inputs_give_the_same_key(self) -> None:
        assert key() == key() and len(key()) == 64

    @pytest.mark.parametrize(
        "change",
        [
            {"question": "When was the bridge closed?"},
            {"evidence": ["The bridge opened in 1933.", "It is 503 m long."]},
            {"evidence": ["It is 503 m long.", "The bridge opened in 1932."]},
            {"evidence": ["The bridge opened in 1932."]},
            {"evidence": None},
            {"evidence": []},
            {"response": "It opened in 1933."},
            {"model": "judge-70b"},
            {"top_logprobs": 20},
            {"prompt_version": "judge-prompt-2:000000000000"},
        ],
        ids=lambda c: next(iter(c)),
    )
    def test_every_input_moves_the_key(self, change) -> None:
        assert key(**change) != key()

    def test_chunk_boundaries_count(self) -> None:
        assert key(evidence=["ab", "c"]) != key(evidence=["a", "bc"])

    def test_a_string_context_is_one_chunk(self) -> None:
        assert key(evidence="x") == key(evidence=["x"])

    def test_the_prompt_version_follows_the_system_prompt(self) -> None:
        assert PROMPT_VERSION.startswith("judge-prompt-") and len(PROMPT_VERSION) > 20


class TestTtl:
    def entry(self, at: float) -> CachedVerdict:
        return CachedVerdict(readout(0.97).to_dict(), at, "c-1")

    def test_fresh_until_exactly_the_ttl(self) -> None:
        assert self.entry(100.0).fresh(100.0 + 59.999, 60.0)
        assert not self.entry(100.0).fresh(160.0, 60.0)

    def test_a_ttl_of_zero_is_no_cache(self) -> None:
        assert not self.entry(100.0).fresh(100.0, 0.0)

    def test_the_route_sets_it(self) -> None:
        assert parse_policy({}).route("default").judge_cache_ttl_seconds == DEFAULT_TTL_S
        route = parse_policy({"routes": {"r": {"judge_cache_ttl_seconds": 0}}}).route("r")
        assert route.judge_cache_ttl_seconds == 0.0

    @pytest.mark.parametrize("bad", [-1, float("inf"), True, "1h", 31 * 24 * 3600])
    def test_a_bad_ttl_is_refused_naming_it(self, bad) -> None:
        with pytest.raises(PolicyError) as caught:
            parse_policy({"routes": {"r": {"judge_cache_ttl_seconds": bad}}})
        assert caught.value.field == "routes.r.judge_cache_ttl_seconds"
        with pytest.raises(PolicyError):
            check_ttl(bad, "x")


class TestWhatIsKept:
    def test_clear_yes_and_clear_no_are_kept(self) -> None:
        assert cacheable(readout(0.97), JudgeConfig())
        assert cacheable(readout(0.03), JudgeConfig())

    @pytest.mark.parametrize(
        "got",
        [
            None,
            readout(0.5),
            readout(0.97, JudgeStatus.WEAK_MASS),
            JudgeReadout(JudgeStatus.MALFORMED, detail="not json"),
            JudgeReadout(JudgeStatus.NO_LOGPROBS),
        ],
    )
    def test_failures_and_unsure_are_not(self, got) -> None:
        assert not cacheable(got, JudgeConfig())

    def test_clear_is_read_under_the_bars_of_the_day(self) -> None:
        assert not cacheable(readout(0.93), JudgeConfig(accept_bar=0.95))

    def test_an_entry_round_trips_its_readout(self) -> None:
        entry = CachedVerdict(readout(0.97).to_dict(), 12.5, "c-1")
        back = CachedVerdict.from_dict(entry.to_dict())
        assert back == entry
        assert readout_from_dict(back.readout) == readout(0.97)

    @pytest.mark.parametrize(
        "junk",
        [None, "x", {"readout": {}, "at": 1.0}, {"readout": {"status": "ok"}, "at": "t"}, {}],
    )
    def test_an_unreadable_entry_is_a_miss(self, junk) -> None:
        assert CachedVerdict.from_dict(junk) is None


class TestEvictions:
    def test_expired_go(self) -> None:
        gone = evictions([(b"a", 0.0), (b"b", 50.0), (b"c", 99.0)], 100.0, 50.0)
        assert gone == [b"a", b"b"]

    def test_past_the_cap_the_oldest_go(self) -> None:
        entries = [(b"%d" % i, float(i)) for i in range(10)]
        assert sorted(evictions(entries, 10.0, 100.0, limit=7)) == [b"0", b"1", b"2"]
