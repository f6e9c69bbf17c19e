"""Reviewers' own credentials: the tokens file holds digests only, a token names exactly
its reviewer, a bad file is one line naming the setting, and the CLI adds a reviewer and
records a verdict under the name the reviewer's token proves (no broker: the verdict's
Kafka call is replaced at the CLI's seam)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from workers.cli import main
from workers.runtime import review
from workers.runtime.reviewers import (
    ReviewerFileError,
    add_reviewer,
    load_reviewers,
    parse_reviewers,
    token_digest,
)

ANN, BOB = "ann-token-1", "bob-token-2"
FILE_TEXT = f"# who reviews\n\nann:{token_digest(ANN)}\nbob@example.org:{token_digest(BOB)}\n"


def test_a_token_names_its_reviewer_and_nobody_else() -> None:
    reviewers = parse_reviewers(FILE_TEXT)
    assert reviewers.names() == ["ann", "bob@example.org"]
    assert reviewers.match(ANN) == "ann"
    assert reviewers.match(BOB) == "bob@example.org"
    for wrong in ("", "ann", ANN + " ", token_digest(ANN)):  # the digest is not the token
        assert reviewers.match(wrong) is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("ann", "expected `name:<sha256"),
        (f"two words:{token_digest(ANN)}", "expected `name:<sha256"),
        ("ann:plain-token", "not a SHA-256 digest"),
        (f"ann:{token_digest(ANN)}\nann:{token_digest(BOB)}", "ann is named twice"),
        (f"ann:{token_digest(ANN)}\nbob:{token_digest(ANN)}", "the same token"),
    ],
)
def test_a_bad_line_is_one_error_naming_the_setting_and_line(line: str, message: str) -> None:
    with pytest.raises(ReviewerFileError, match=message) as caught:
        parse_reviewers(line)
    assert str(caught.value).startswith("GROUNDSTREAM_REVIEWER_TOKENS_FILE line ")
    assert "\n" not in str(caught.value)


def test_add_reviewer_appends_a_digest_and_returns_the_token_once(tmp_path: Path) -> None:
    path = tmp_path / "reviewers.txt"
    token = add_reviewer(path, "ann")
    assert len(token) >= 40
    assert token not in path.read_text()  # only its digest is kept
    assert load_reviewers(path).match(token) == "ann"
    other = add_reviewer(path, "bob")
    assert other != token and load_reviewers(path).match(other) == "bob"
    with pytest.raises(ReviewerFileError, match="already a reviewer"):
        add_reviewer(path, "ann")
    with pytest.raises(ReviewerFileError, match="letters, digits"):
        add_reviewer(path, "a b")


def test_the_cli_adds_a_reviewer_and_prints_only_the_token_on_stdout(tmp_path: Path) -> None:
    path = tmp_path / "reviewers.txt"
    result = CliRunner().invoke(
        main,
        ["review", "add-reviewer", "carol"],
        env={"GROUNDSTREAM_REVIEWER_TOKENS_FILE": str(path)},
    )
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert load_reviewers(path).match(token) == "carol"
    assert "shown only now" in result.stderr


@pytest.fixture
def decided(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Who each CLI verdict reached `workers.runtime.review.decide` as."""
    seen: list[str] = []

    async def fake(settings, policy, candidate_id, verdict, by, note) -> dict[str, Any]:
        seen.append(by)
        return {"candidate_id": candidate_id, "action": verdict.value}

    monkeypatch.setattr(review, "decide", fake)
    return seen


def decide(env: dict[str, str], *extra: str) -> Any:
    return CliRunner().invoke(main, ["review", "decide", "c-1", "accept", *extra], env=env)


def test_with_a_tokens_file_the_cli_records_the_tokens_reviewer(
    tmp_path: Path, decided: list[str]
) -> None:
    path = tmp_path / "reviewers.txt"
    path.write_text(FILE_TEXT)
    env = {"GROUNDSTREAM_REVIEWER_TOKENS_FILE": str(path)}
    for token, name in ((ANN, "ann"), (BOB, "bob@example.org")):
        result = decide({**env, "GROUNDSTREAM_REVIEWER_TOKEN": token})
        assert result.exit_code == 0, result.output
        assert result.stdout == f"c-1: accept by {name}\n"
    assert decided == ["ann", "bob@example.org"]

    refused = [
        (decide(env), "put your own reviewer token in GROUNDSTREAM_REVIEWER_TOKEN"),
        (decide({**env, "GROUNDSTREAM_REVIEWER_TOKEN": "wrong"}), "matches no reviewer"),
        (
            decide({**env, "GROUNDSTREAM_REVIEWER_TOKEN": ANN}, "--by", "bob"),
            "--by bob is not the token's reviewer (ann)",
        ),
    ]
    for result, message in refused:
        assert result.exit_code == 1 and message in result.output, result.output
        assert "Traceback" not in result.output
    assert decided == ["ann", "bob@example.org"]  # nothing more reached the queue


def test_without_a_tokens_file_the_cli_needs_by(decided: list[str]) -> None:
    result = decide({})
    assert result.exit_code == 2 and "needs --by" in result.output
    assert decide({}, "--by", "alice").exit_code == 0
    assert decided == ["alice"]


def test_the_dashboard_refuses_to_start_on_a_bad_tokens_file(tmp_path: Path) -> None:
    path = tmp_path / "reviewers.txt"
    path.write_text("ann:the-token-itself\n")
    result = CliRunner().invoke(
        main,
        ["dashboard"],
        env={
            "GROUNDSTREAM_REVIEWER_TOKENS_FILE": str(path),
            "GROUNDSTREAM_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        },
    )
    assert result.exit_code == 2, result.output
    assert f"GROUNDSTREAM_REVIEWER_TOKENS_FILE={path} line 1" in result.output
    assert "not a SHA-256 digest" in result.output
