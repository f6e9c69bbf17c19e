"""Bounded work per candidate (issue 23, item 1): the caps are decided before the
expensive part, by a pure function, from settings validated at start-up."""

from __future__ import annotations

import pytest

from pipeline.errors import PolicyError
from pipeline.guards.admission import WorkCaps, admit
from pipeline.policy.document import load_policy
from pipeline.rungs.rule_checks import RuleInput, RulesAction, RulesConfig, evaluate_rules
from topics.codec import dumps, loads
from topics.conclusion import read_conclusion
from topics.names import Topic
from workers.interfaces import Inbound, StageContext
from workers.runtime.settings import Settings, SettingsError
from workers.stages.geometry import GeometryStage

NOW = 1_700_000_000.0
CAPS = WorkCaps(response_words=10, source_words=20, claims=3)


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


class TestCaps:
    @pytest.mark.parametrize("field", ["response_words", "source_words", "claims"])
    @pytest.mark.parametrize("value", [0, -1, True, 2.5])
    def test_a_bad_cap_is_refused_by_name(self, field: str, value: object) -> None:
        with pytest.raises(PolicyError, match=f"caps.{field}"):
            WorkCaps(**{field: value})  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("variable", "attribute"),
        [
            ("GROUNDSTREAM_MAX_RESPONSE_WORDS", "response_words"),
            ("GROUNDSTREAM_MAX_SOURCE_WORDS", "source_words"),
            ("GROUNDSTREAM_MAX_CLAIMS", "claims"),
        ],
    )
    def test_settings_build_the_caps_and_refuse_a_bad_value(
        self, variable: str, attribute: str
    ) -> None:
        assert getattr(Settings.from_env({variable: "7"}).work_caps(), attribute) == 7
        with pytest.raises(SettingsError, match=variable):
            Settings.from_env({variable: "0"})

    def test_the_defaults_keep_the_shipped_fitted_range(self) -> None:
        ranges = load_policy(None).grounding.domain.ranges  # type: ignore[union-attr]
        caps = Settings().work_caps()
        assert caps.response_words > ranges["response_words"][1]
        # A fitted source of 10 windows holds about 1,600 words (RAGTruth dev's largest).
        assert caps.source_words > ranges["context_windows"][1] * 256


class TestAdmit:
    def test_at_each_cap_the_candidate_is_admitted(self) -> None:
        assert admit(words(5), [words(15)], "One. Two. " + words(8), CAPS).admitted

    def test_one_word_over_the_answer_cap(self) -> None:
        verdict = admit("q", None, words(11), CAPS)
        assert not verdict.admitted
        assert verdict.reason == "over the work cap: response_words 11 over the cap of 10"

    def test_the_question_and_every_chunk_count_as_source(self) -> None:
        verdict = admit(words(5), [words(10), words(6)], "short answer", CAPS)
        assert verdict.reason == "over the work cap: source_words 21 over the cap of 20"

    def test_claims_over_the_cap(self) -> None:
        answer = "Paris glows. Rome ages. Oslo freezes. Bern rests."
        verdict = admit("q", ["ctx"], answer, CAPS)
        assert verdict.reason == "over the work cap: claims 4 over the cap of 3"
        assert dict(verdict.measures)["claims"] == 4

    def test_claims_are_not_counted_past_a_word_cap(self) -> None:
        verdict = admit("q", None, "A b. " * 1000, CAPS)
        assert "claims" not in dict(verdict.measures)

    def test_a_huge_answer_is_weighed_by_counting_words_only(self, monkeypatch) -> None:
        def no_claims(text: str) -> None:
            raise AssertionError("split the claims of an answer over the word cap")

        monkeypatch.setattr("pipeline.guards.admission.split_claims", no_claims)
        answer = "The river Alpha flows 12 miles through Berlin. " * 20_000  # ~940 KB
        assert not admit("q", ["ctx"], answer, WorkCaps()).admitted


class TestRulesBounded:
    CONTEXT = ("The river Alpha flows 12 miles through Berlin.",)

    def test_over_the_cap_source_support_is_not_measured_and_says_so(self) -> None:
        inp = RuleInput("Where does it flow?", self.CONTEXT, "It flows 99 miles. " * 4)
        verdict = evaluate_rules(inp, RulesConfig(), None, WorkCaps(response_words=5))
        hit = next(h for h in verdict.hits if h.rule == "source_support")
        assert hit.message == (
            "source support not checked: over the work cap: response_words 16 over the cap of 5"
        )
        assert verdict.action is RulesAction.REVIEW

    def test_within_the_caps_the_rules_are_unchanged(self) -> None:
        inp = RuleInput("Where does it flow?", self.CONTEXT, "It flows 99 miles through Berlin.")
        assert evaluate_rules(inp, RulesConfig(), None, WorkCaps()) == evaluate_rules(
            inp, RulesConfig()
        )

    def test_over_the_cap_support_is_never_measured(self, monkeypatch) -> None:
        def measured(*args: object) -> None:
            raise AssertionError("measured source support over the work cap")

        monkeypatch.setattr("pipeline.rungs.rule_checks.measure_support", measured)
        answer = "The river Alpha flows 12 miles through Berlin. " * 20_000
        verdict = evaluate_rules(
            RuleInput("q", self.CONTEXT, answer), RulesConfig(), None, WorkCaps()
        )
        # A rule that raised would say "rule failed"; this one was not run at all.
        assert [h.message.split(":")[0] for h in verdict.hits if h.rule == "source_support"] == [
            "source support not checked"
        ]


class _NoEncoder:
    """An encoder that must not be called."""

    def encode(self, texts: object) -> object:
        raise AssertionError("encoded a candidate over the work cap")

    def windows(self, text: str) -> list[str]:
        raise AssertionError("windowed a candidate over the work cap")


class TestGeometryStage:
    async def test_over_the_cap_goes_to_review_unencoded(self) -> None:
        ctx = StageContext(
            policy=load_policy(None),
            clock=lambda: NOW,
            caps=WorkCaps(response_words=10),
            services={"encoder": _NoEncoder()},
        )
        body = {
            "id": "big",
            "session_id": "s1",
            "question": "What colour is the sky?",
            "context": "The sky is blue.",
            "response": words(11),
        }
        emits = await GeometryStage().process(
            [Inbound(b"s1", dumps(body), "t.candidates", 0, 1)], ctx
        )
        record = next(loads(e.value) for e in emits if e.topic is Topic.DECISIONS)
        assert record["gate"] == "work_cap"
        assert record["action"] == "escalate"
        assert record["reason"] == "over the work cap: response_words 11 over the cap of 10"
        assert record["evidence"]["admission"]["response_words"] == 11
        concluded = next(e for e in emits if e.topic is Topic.CONCLUDED)
        ending = read_conclusion(concluded.value, concluded.headers)
        assert (ending.candidate_id, ending.topic) == ("big", Topic.REVIEW.value)
