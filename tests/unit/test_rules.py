"""Stage 4 rules: each rule's hits and spans, PII detectors, severity, config validation."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.claims.support import Span
from pipeline.errors import PolicyError
from pipeline.rungs.rule_checks import (
    PII_KINDS,
    RULE_NAMES,
    RULES,
    RuleHit,
    RuleInput,
    RulesAction,
    RulesConfig,
    RulesVerdict,
    Severity,
    evaluate_rules,
    luhn_valid,
)

CONTEXT = ("Acme keeps deleted files for 30 days on the Business plan. Support is in Lisbon.",)
QUESTION = "What is the retention policy?"


def run(
    response: str,
    *,
    context: tuple[str, ...] | None = CONTEXT,
    metadata: Mapping[str, object] | None = None,
    question: str = QUESTION,
    **config: object,
) -> RulesVerdict:
    inp = RuleInput(question, context, response, metadata or {})
    return evaluate_rules(inp, RulesConfig.from_mapping(config))


def hits_of(verdict: RulesVerdict, rule: str) -> list[RuleHit]:
    return [h for h in verdict.hits if h.rule == rule]


def at(text: str, part: str) -> Span:
    start = text.index(part)
    return Span(part, start, start + len(part))


class TestVerdict:
    def test_grounded_answer_passes(self) -> None:
        v = run("Acme keeps deleted files for 30 days.")
        assert v.hits == ()
        assert v.action is RulesAction.PASS

    def test_any_hit_means_review(self) -> None:
        v = run("Deleted files are kept for 90 days.")
        assert v.action is RulesAction.REVIEW
        assert {h.severity for h in v.hits} == {Severity.REVIEW}

    def test_reject_rule_turns_its_hits_into_reject(self) -> None:
        v = run("Deleted files are kept for 90 days.", reject_rules=["source_support"])
        assert v.action is RulesAction.REJECT
        assert all(h.severity is Severity.REJECT for h in v.hits)

    def test_reject_rule_leaves_other_rules_at_review(self) -> None:
        response = "Write to ops@acme.example."
        v = run(response, context=None, reject_rules=["deny_list"])
        assert [h.rule for h in v.hits] == ["pii"]
        assert v.action is RulesAction.REVIEW

    def test_one_reject_hit_outweighs_review_hits(self) -> None:
        response = "Write to ops@acme.example, it is confidential."
        v = run(response, context=None, reject_rules=["pii"], deny_patterns=["confidential"])
        assert {h.severity for h in v.hits} == {Severity.REVIEW, Severity.REJECT}
        assert v.action is RulesAction.REJECT

    def test_to_dict_is_json_ready(self) -> None:
        response = "Acme keeps deleted files for 90 days."
        d = run(response).to_dict()
        assert d == {
            "action": "review",
            "hits": [
                {
                    "rule": "source_support",
                    "message": "number '90' is not in the source",
                    "span": {"text": "90", "start": 29, "end": 31},
                    "severity": "review",
                }
            ],
        }

    def test_hit_without_span_serialises_none(self) -> None:
        d = run("ok", max_response_chars=1).to_dict()
        assert d["hits"] == [
            {
                "rule": "max_length",
                "message": "response is 2 characters, over the limit of 1",
                "span": None,
                "severity": "review",
            }
        ]

    def test_a_failing_rule_fails_closed(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def boom(text: str, context: object, question: str) -> None:
            raise RuntimeError("broken")

        monkeypatch.setattr("pipeline.rungs.rule_checks.measure_support", boom)
        v = run("Deleted files are kept for 30 days.")
        assert v.action is RulesAction.REVIEW
        (hit,) = v.hits
        assert hit.rule == "source_support"
        assert "RuntimeError" in hit.message


class TestSourceSupport:
    def test_invented_number_hit_has_its_span(self) -> None:
        response = "Acme keeps deleted files for 90 days."
        (hit,) = hits_of(run(response), "source_support")
        assert hit.span == Span("90", 29, 31)
        assert "90" in hit.message

    def test_invented_name_hit_has_its_span(self) -> None:
        response = "Support for deleted files is in Madrid."
        (hit,) = hits_of(run(response), "source_support")
        assert hit.span == at(response, "Madrid")
        assert "name 'Madrid'" in hit.message

    def test_low_coverage_hit_names_coverage_and_words(self) -> None:
        response = "Refunds require signed affidavits."
        (hit,) = hits_of(run(response), "source_support")
        assert hit.span is None
        assert "0.00" in hit.message
        assert "minimum 0.50" in hit.message
        assert "'affidavits'" in hit.message

    def test_coverage_exactly_at_minimum_passes(self) -> None:
        # content: files, kept, vanish, quietly -> "files" supported; 1/4 = 0.25
        response = "Files vanish quietly, kept."
        assert not hits_of(run(response, min_content_coverage=0.25), "source_support")
        assert hits_of(run(response, min_content_coverage=0.26), "source_support")

    def test_flags_can_be_turned_off(self) -> None:
        response = "Files are in Madrid for 90 days."
        v = run(response, flag_unsupported_numbers=False, flag_unsupported_names=False)
        assert not hits_of(v, "source_support")

    def test_no_source_skips_the_rule(self) -> None:
        assert run("Refunds need 90 signed forms from Madrid.", context=None).hits == ()

    def test_question_words_do_not_need_support(self) -> None:
        v = run("Acme keeps them.", context=("Files stay.",), question="Does Acme keep files?")
        assert v.action is RulesAction.PASS

    def test_long_lists_of_unsupported_words_are_cut(self) -> None:
        response = " ".join(f"word{chr(97 + i)}x" for i in range(15))
        (hit,) = hits_of(run(response), "source_support")
        assert "and 5 more" in hit.message


class TestDenyList:
    def test_match_is_a_hit_with_span(self) -> None:
        response = "The admin password is hunter2."
        (hit,) = hits_of(run(response, deny_patterns=[r"password"]), "deny_list")
        assert hit.span == Span("password", 10, 18)
        assert "'password'" in hit.message

    def test_matching_is_case_insensitive(self) -> None:
        assert hits_of(run("INTERNAL ONLY", deny_patterns=["internal only"]), "deny_list")

    def test_every_match_is_reported(self) -> None:
        v = run("secret one, secret two", deny_patterns=[r"secret \w+"])
        assert [h.span.text for h in hits_of(v, "deny_list") if h.span] == [
            "secret one",
            "secret two",
        ]

    def test_empty_matches_are_ignored(self) -> None:
        assert not hits_of(run("anything", deny_patterns=[r"x*"]), "deny_list")

    def test_no_patterns_no_hits(self) -> None:
        assert not hits_of(run("password"), "deny_list")


class TestLuhn:
    @pytest.mark.parametrize(
        "number",
        [
            "4111111111111111",
            "5555555555554444",
            "378282246310005",
            "6011111111111117",
            "79927398713",
        ],
    )
    def test_valid_numbers(self, number: str) -> None:
        assert luhn_valid(number)

    @pytest.mark.parametrize(
        "number",
        ["4111111111111112", "5555555555554445", "378282246310006", "79927398710", ""],
    )
    def test_one_digit_off_or_empty_is_invalid(self, number: str) -> None:
        assert not luhn_valid(number)

    @pytest.mark.parametrize("text", ["4111 1111 1111 1111", "4111-1111", "abc", "٤١١١"])
    def test_non_digits_are_invalid(self, text: str) -> None:
        assert not luhn_valid(text)


def pii_spans(response: str, **config: object) -> list[Span | None]:
    return [h.span for h in hits_of(run(response, context=None, **config), "pii")]


class TestPii:
    def test_email(self) -> None:
        response = "Write to jane.doe@example.co.uk today."
        assert pii_spans(response) == [at(response, "jane.doe@example.co.uk")]

    @pytest.mark.parametrize(
        "phone",
        [
            "+44 20 7946 0958",
            "+1-555-123-4567",
            "+49 (30) 1234567",
            "(555) 123-4567",
            "555-123-4567",
            "555.123.4567",
            "020 7946 0958",
            "0612345678",
        ],
    )
    def test_phone_formats(self, phone: str) -> None:
        response = f"Call {phone} now."
        assert pii_spans(response) == [at(response, phone)]

    @pytest.mark.parametrize(
        "card",
        ["4111 1111 1111 1111", "4111-1111-1111-1111", "378282246310005", "5555555555554444"],
    )
    def test_luhn_valid_card(self, card: str) -> None:
        response = f"Pay with {card}."
        (hit,) = hits_of(run(response, context=None), "pii")
        assert hit.span == at(response, card)
        assert "payment card" in hit.message

    @pytest.mark.parametrize(
        "text",
        [
            "Scores: 41 11 11 11 11 11 11 11.",  # Luhn-valid digits, but a list of small numbers
            "Codes 4111 1111-1111 1111.",  # separators not consistent
        ],
    )
    def test_digit_lists_are_not_cards(self, text: str) -> None:
        assert luhn_valid("".join(c for c in text if c.isdigit()))
        assert pii_spans(text) == []

    def test_card_followed_by_another_number(self) -> None:
        response = "Card 4111 1111 1111 1111 5 items"
        assert pii_spans(response) == [at(response, "4111 1111 1111 1111")]

    @pytest.mark.parametrize(
        "text",
        [
            "Pay with 4111 1111 1111 1112.",  # one digit off: fails Luhn
            "Founded in 1991, it had 1,234,567,890 users and 30 offices.",
            "The years 2019, 2020 and 2021; order 123456789 shipped.",
            "Pi is 3.14159265358979 and the ratio 0.123456789.",
            "Between 1990-2000 the rate was 12.5% and ISBN 978-3-16-148410-0.",
            "Files are kept for 30 days on the Business plan.",
            "Email support or phone the desk; the card was lost.",
            "Use version 10.0.19041 and build 2024-01-15.",
        ],
    )
    def test_normal_text_has_no_pii(self, text: str) -> None:
        assert pii_spans(text) == []

    def test_hits_come_in_text_order(self) -> None:
        response = "Call 555-123-4567 or mail a@b.io, card 4111111111111111."
        spans = pii_spans(response)
        assert [s.text for s in spans if s] == ["555-123-4567", "a@b.io", "4111111111111111"]

    def test_only_configured_kinds_are_checked(self) -> None:
        response = "Mail a@b.io or call 555-123-4567."
        assert pii_spans(response, pii=["phone"]) == [at(response, "555-123-4567")]
        assert pii_spans(response, pii=[]) == []


class TestMaxLength:
    def test_at_the_limit_passes(self) -> None:
        assert not hits_of(run("x" * 10, context=None, max_response_chars=10), "max_length")

    def test_one_over_the_limit_is_a_hit(self) -> None:
        (hit,) = hits_of(run("x" * 11, context=None, max_response_chars=10), "max_length")
        assert "11 characters" in hit.message
        assert "limit of 10" in hit.message


class TestRequiredFields:
    def test_present_fields_pass(self) -> None:
        v = run("x", context=None, required_fields=["tenant"], metadata={"tenant": "t1"})
        assert v.action is RulesAction.PASS

    def test_missing_field_is_a_hit(self) -> None:
        (hit,) = run("x", context=None, required_fields=["tenant"]).hits
        assert hit.rule == "required_fields"
        assert hit.message == "metadata field 'tenant' is missing"
        assert hit.span is None

    @pytest.mark.parametrize("value", [None, "", "   ", [], {}])
    def test_empty_field_is_a_hit(self, value: object) -> None:
        (hit,) = run("x", context=None, required_fields=["tenant"], metadata={"tenant": value}).hits
        assert hit.message == "metadata field 'tenant' is empty"

    @pytest.mark.parametrize("value", [0, False, "t"])
    def test_falsy_scalars_are_present(self, value: object) -> None:
        v = run("x", context=None, required_fields=["n"], metadata={"n": value})
        assert v.hits == ()


class TestConfig:
    def test_defaults(self) -> None:
        c = RulesConfig()
        assert c.min_content_coverage == 0.5
        assert c.pii == PII_KINDS == {"email", "phone", "payment_card"}
        assert c.max_response_chars == 20000
        assert c.reject_rules == frozenset()
        assert RulesConfig.from_mapping({}) == c

    def test_from_mapping_normalises_lists(self) -> None:
        c = RulesConfig.from_mapping(
            {"deny_patterns": ["a", "b"], "pii": ["email"], "reject_rules": ["pii"]}
        )
        assert c.deny_patterns == ("a", "b")
        assert c.pii == frozenset({"email"})
        assert c.reject_rules == frozenset({"pii"})

    @pytest.mark.parametrize(
        ("data", "field"),
        [
            ({"min_content_coverage": 1.5}, "rules.min_content_coverage"),
            ({"min_content_coverage": -0.1}, "rules.min_content_coverage"),
            ({"min_content_coverage": "0.5"}, "rules.min_content_coverage"),
            ({"min_content_coverage": float("nan")}, "rules.min_content_coverage"),
            ({"min_content_coverage": True}, "rules.min_content_coverage"),
            ({"flag_unsupported_numbers": "yes"}, "rules.flag_unsupported_numbers"),
            ({"flag_unsupported_names": 1}, "rules.flag_unsupported_names"),
            ({"deny_patterns": "password"}, "rules.deny_patterns"),
            ({"deny_patterns": ["(unclosed"]}, "rules.deny_patterns"),
            ({"deny_patterns": [""]}, "rules.deny_patterns"),
            ({"pii": ["ssn"]}, "rules.pii"),
            ({"max_response_chars": 0}, "rules.max_response_chars"),
            ({"max_response_chars": 10.0}, "rules.max_response_chars"),
            ({"required_fields": [3]}, "rules.required_fields"),
            ({"reject_rules": ["no_such_rule"]}, "rules.reject_rules"),
            ({"max_chars": 10}, "rules.max_chars"),
        ],
    )
    def test_invalid_value_names_the_field(self, data: dict[str, object], field: str) -> None:
        with pytest.raises(PolicyError, match=re.escape(field)) as info:
            RulesConfig.from_mapping(data)
        assert info.value.field == field

    def test_direct_construction_is_validated_too(self) -> None:
        with pytest.raises(PolicyError, match=r"rules\.min_content_coverage"):
            RulesConfig(min_content_coverage=2.0)

    def test_unknown_key_lists_the_known_ones(self) -> None:
        with pytest.raises(PolicyError, match="min_content_coverage"):
            RulesConfig.from_mapping({"colour": "red"})

    def test_rule_names_match_the_rules_tuple(self) -> None:
        assert (
            RULE_NAMES
            == {r.name for r in RULES}
            == {
                "source_support",
                "deny_list",
                "pii",
                "max_length",
                "required_fields",
            }
        )


class TestRuleInput:
    def test_metadata_is_copied_and_read_only(self) -> None:
        meta = {"tenant": "t1"}
        inp = RuleInput("q", None, "r", meta)
        meta["tenant"] = "changed"
        assert inp.metadata["tenant"] == "t1"
        with pytest.raises(TypeError):
            inp.metadata["tenant"] = "x"  # type: ignore[index]

    def test_context_list_becomes_tuple(self) -> None:
        assert RuleInput("q", ["a", "b"], "r", {}).context == ("a", "b")  # type: ignore[arg-type]


class TestProperties:
    @given(
        response=st.text(max_size=200),
        context=st.none() | st.lists(st.text(max_size=100), max_size=3).map(tuple),
    )
    def test_deterministic_and_action_matches_hits(
        self, response: str, context: tuple[str, ...] | None
    ) -> None:
        inp = RuleInput("question", context, response, {})
        config = RulesConfig(reject_rules=frozenset({"pii"}))
        v = evaluate_rules(inp, config)
        assert v == evaluate_rules(inp, config)
        assert all(
            h.span is None or response[h.span.start : h.span.end] == h.span.text for h in v.hits
        )
        if any(h.severity is Severity.REJECT for h in v.hits):
            assert v.action is RulesAction.REJECT
        else:
            assert v.action is (RulesAction.REVIEW if v.hits else RulesAction.PASS)

    @given(response=st.text(alphabet="abcdefgh ,.0123456789", max_size=200))
    def test_response_as_its_own_source_has_no_support_hits(self, response: str) -> None:
        v = evaluate_rules(RuleInput("", (response,), response, {}), RulesConfig())
        assert not hits_of(v, "source_support")
