"""Per-stage keys: `keys generate`, the trusted folder and its rollover, the start-up rule
(refuse on a secured broker, warn once on PLAINTEXT), and decision records trusted only
when the stage they name signed them (the review queue's pending list, `audit verify`)."""

from __future__ import annotations

import logging
import stat
from collections import namedtuple
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pipeline.bounds.conclusions import SIGNERS
from pipeline.trail.audit import Finding, verify
from pipeline.trail.records import make_record
from topics.codec import dumps
from topics.names import Topic
from topics.security import keys
from topics.security.keys import KeyFileError, load_signer, load_trusted
from topics.security.signatures import Unverified, sign
from topics.security.signatures import verify as verify_signature
from workers.cli import main
from workers.runtime import signing
from workers.runtime.audit import decision_messages
from workers.runtime.review import _decisions
from workers.runtime.settings import Settings

Message = namedtuple("Message", "topic partition offset key value headers timestamp")


def generate(out: Path, *args: str) -> None:
    ran = CliRunner().invoke(main, ["keys", "generate", "--out", str(out), *args])
    assert ran.exit_code == 0, ran.output


def test_generate_writes_a_private_key_only_its_owner_reads_and_a_public_key_per_stage(
    tmp_path: Path,
) -> None:
    generate(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{s}{ext}" for s in SIGNERS for ext in (".key", ".pub")
    )
    assert "review" in SIGNERS
    for stage in SIGNERS:
        assert stat.S_IMODE((tmp_path / f"{stage}.key").stat().st_mode) == 0o600
    signer = load_signer(tmp_path / "rules.key", "rules")
    trusted = load_trusted(tmp_path)
    headers = sign(signer, "concluded", b"k", b"v")
    assert verify_signature(trusted, "concluded", b"k", b"v", headers) == "rules"
    # Another stage's key does not speak for rules.
    impostor = load_signer(tmp_path / "geometry.key", "rules")
    with pytest.raises(Unverified, match="does not verify"):
        verify_signature(trusted, "concluded", b"k", b"v", sign(impostor, "concluded", b"k", b"v"))
    # A second run never overwrites a private key.
    ran = CliRunner().invoke(main, ["keys", "generate", "--out", str(tmp_path), "--stage", "rules"])
    assert ran.exit_code == 1 and "rules.key exists: not overwritten" in ran.output


def test_generate_k8s_writes_a_secret_per_stage_and_a_configmap_of_public_keys(
    tmp_path: Path,
) -> None:
    """Private keys in Secrets, public keys (not secret) in a ConfigMap; what they hold is
    the key pair itself, so a pod mounting both can sign and be verified."""
    import base64

    import yaml

    generate(tmp_path, "--k8s", "--stage", "rules", "--stage", "geometry")
    docs = list(yaml.safe_load_all((tmp_path / "keys.yaml").read_text()))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Secret", "groundstream-signing-rules"),
        ("Secret", "groundstream-signing-geometry"),
        ("ConfigMap", "groundstream-trusted-keys"),
    ]
    assert set(docs[0]["data"]) == {"signing.key"}
    assert set(docs[2]["data"]) == {"rules.pub", "geometry.pub"}
    (tmp_path / "rules.key").write_bytes(base64.b64decode(docs[0]["data"]["signing.key"]))
    (tmp_path / "trusted").mkdir()
    for name, pem in docs[2]["data"].items():
        (tmp_path / "trusted" / name).write_text(pem)
    headers = sign(load_signer(tmp_path / "rules.key", "rules"), "concluded", b"k", b"v")
    trusted = load_trusted(tmp_path / "trusted")
    assert verify_signature(trusted, "concluded", b"k", b"v", headers) == "rules"


def rollover(tmp_path: Path) -> tuple[Path, Path, list, list]:
    """A trusted folder holding rules's old key, the folder of its new pair, and a message
    signed with each key: (trusted folder, new pair's folder, by old, by new)."""
    old, new = tmp_path / "old", tmp_path / "new"
    generate(old, "--stage", "rules")
    generate(new, "--stage", "rules")
    trusted_dir = tmp_path / "trusted"
    trusted_dir.mkdir()
    (trusted_dir / "rules.pub").write_bytes((old / "rules.pub").read_bytes())
    by_old = sign(load_signer(old / "rules.key", "rules"), "concluded", None, b"v")
    by_new = sign(load_signer(new / "rules.key", "rules"), "concluded", None, b"v")
    return trusted_dir, new, list(by_old), list(by_new)


def test_a_rollover_trusts_every_key_of_a_stage_until_its_file_is_removed(tmp_path: Path) -> None:
    trusted_dir, new, by_old, by_new = rollover(tmp_path)
    (trusted_dir / "rules.2026-12.pub").write_bytes((new / "rules.pub").read_bytes())
    both = load_trusted(trusted_dir)
    assert len(both.keys["rules"]) == 2
    for headers in (by_old, by_new):
        assert verify_signature(both, "concluded", None, b"v", headers) == "rules"
    (trusted_dir / "rules.pub").unlink()  # the rollover is done: the old key goes
    only_new = load_trusted(trusted_dir)
    assert verify_signature(only_new, "concluded", None, b"v", by_new) == "rules"
    with pytest.raises(Unverified):
        verify_signature(only_new, "concluded", None, b"v", by_old)


def test_a_bad_key_file_or_an_empty_folder_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match=r"no public keys \(\*\.pub\) in"):
        load_trusted(tmp_path)
    (tmp_path / "rules.pub").write_text("not a key")
    with pytest.raises(KeyFileError, match=r"rules\.pub is not a PEM public key"):
        load_trusted(tmp_path)
    with pytest.raises(KeyFileError, match=r"rules\.pub is not an unencrypted PEM private key"):
        load_signer(tmp_path / "rules.pub", "rules")


SECURED = {
    "GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "GROUNDSTREAM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "GROUNDSTREAM_KAFKA_SASL_USERNAME": "geometry",
    "GROUNDSTREAM_KAFKA_SASL_PASSWORD": "secret",
    "GROUNDSTREAM_BOOTSTRAP_SERVERS": "127.0.0.1:1",  # never reached: refused before
}


def test_a_worker_on_sasl_ssl_without_its_key_refuses_to_start_in_one_line() -> None:
    ran = CliRunner().invoke(main, ["worker", "geometry"], env=SECURED)
    assert ran.exit_code == 1
    line = ran.output.strip()
    assert "\n" not in line and line.startswith("groundstream: ")
    assert "GROUNDSTREAM_SIGNING_KEY_FILE is not set: on a SASL_SSL broker geometry" in line
    assert "`groundstream keys generate --out DIR`" in line


def test_a_writer_on_sasl_ssl_without_trusted_keys_refuses_to_start(tmp_path: Path) -> None:
    generate(tmp_path, "--stage", "terminal")
    env = SECURED | {"GROUNDSTREAM_SIGNING_KEY_FILE": str(tmp_path / "terminal.key")}
    ran = CliRunner().invoke(main, ["worker", "terminal"], env=env)
    assert ran.exit_code == 1
    assert "GROUNDSTREAM_TRUSTED_KEYS_DIR is not set: on a SASL_SSL broker" in ran.output


def test_plaintext_without_keys_warns_once_and_runs_unsigned(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(signing, "_warned", set())
    with caplog.at_level(logging.WARNING, "groundstream.signing"):
        for _ in range(3):
            assert signing.stage_keys(Settings(), "rules") == (None, None)
    (warning,) = caplog.records
    assert "GROUNDSTREAM_SIGNING_KEY_FILE is not set" in warning.getMessage()
    assert "running unsigned" in warning.getMessage()


def test_a_stage_worker_signs_with_its_key_and_only_the_writer_holds_the_trusted_keys(
    tmp_path: Path,
) -> None:
    """The keys reach the Kafka worker's context, under the stage's own name."""
    from workers.runtime.runner import build_loop

    generate(tmp_path / "keys", "--stage", "terminal", "--stage", "rules")
    keyed = {"trusted_keys_dir": str(tmp_path / "keys")}
    writer = build_loop(
        "terminal", Settings(signing_key_file=str(tmp_path / "keys" / "terminal.key"), **keyed)
    ).ctx
    rules = build_loop(
        "rules", Settings(signing_key_file=str(tmp_path / "keys" / "rules.key"), **keyed)
    ).ctx
    assert writer.signer is not None and writer.signer.name == "terminal"
    assert writer.trusted is not None and set(writer.trusted.keys) == {"terminal", "rules"}
    assert rules.signer is not None and rules.signer.name == "rules" and rules.trusted is None


def test_worker_all_gives_each_stage_its_own_key_from_the_folder(tmp_path: Path) -> None:
    from workers.runtime.runner import RECORDER, child_env

    settings = Settings(signing_key_file=str(tmp_path / "geometry.key"))
    env = child_env(settings, "rules")
    assert env is not None and env["GROUNDSTREAM_SIGNING_KEY_FILE"] == str(tmp_path / "rules.key")
    assert child_env(settings, RECORDER) is None  # the recorder signs nothing
    assert child_env(Settings(), "rules") is None


def record(stage: str, cid: str = "c1", prev: str = "parked") -> dict:
    return make_record(
        candidate_id=cid,
        session_id="s1",
        turn=0,
        stage=stage,
        action="accept",
        write_to_state=False,
        reason="r",
        policy_version="p",
        decided_at=1_700_000_000.0,
        mode="evaluate",
        route="default",
        prev_hash=prev,
    )


def on_decisions(rec: dict, signer_file: Path | None, name: str, offset: int) -> Message:
    value = dumps(rec)
    headers: tuple = ()
    if signer_file is not None:
        headers = sign(load_signer(signer_file, name), Topic.DECISIONS.value, b"s1", value)
    return Message("decisions", 0, offset, b"s1", value, headers, 1_700_000_000_000)


def test_a_review_record_not_signed_by_review_is_no_verdict_and_audit_names_it(
    tmp_path: Path,
) -> None:
    generate(tmp_path)
    trusted = load_trusted(tmp_path)
    genuine = on_decisions(record("review", "c1", "park-1"), tmp_path / "review.key", "review", 0)
    # The judge's principal may write `decisions`; with its own key it can sign only as judge.
    as_judge = on_decisions(record("review", "c2", "park-2"), tmp_path / "judge.key", "judge", 1)
    posing = on_decisions(record("review", "c3", "park-3"), tmp_path / "judge.key", "review", 2)
    unsigned = on_decisions(record("review", "c4", "park-4"), None, "", 3)
    judge = on_decisions(record("judge", "c5"), tmp_path / "judge.key", "judge", 4)
    messages = [genuine, as_judge, posing, unsigned, judge]

    decided, last = _decisions(messages, trusted)
    assert decided == {"park-1"} and set(last) == {"c1"}
    assert _decisions(messages, None)[0] == {"park-1", "park-2", "park-3", "park-4"}

    found = decision_messages(messages, None, trusted)
    report = verify([], [], None, grace=0, decisions=found)
    named = {p.what: p.detail for p in report.problems if p.kind is Finding.UNSIGNED}
    assert named == {
        "c2/review at decisions[0]@1": "a review record signed by judge",
        "c3/review at decisions[0]@2": "signature does not verify with review's trusted keys",
        "c4/review at decisions[0]@3": "unsigned",
    }


def test_a_running_process_trusts_a_key_added_and_refuses_one_removed_without_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trusted_dir, new, by_old, by_new = rollover(tmp_path)
    now = [0.0]
    held = load_trusted(trusted_dir, clock=lambda: now[0])  # read once, at start-up
    with pytest.raises(Unverified):
        verify_signature(held, "concluded", None, b"v", by_new)
    # The rollover's new key reaches the folder (a ConfigMap's update): the first message
    # signed with it after RETRY_S is checked again against the folder, and holds.
    (trusted_dir / "rules.2026-12.pub").write_bytes((new / "rules.pub").read_bytes())
    with pytest.raises(Unverified):  # within RETRY_S of the last read: not read again
        verify_signature(held, "concluded", None, b"v", by_new)
    now[0] += keys.RETRY_S
    with caplog.at_level(logging.WARNING, logger=keys.__name__):
        assert verify_signature(held, "concluded", None, b"v", by_new) == "rules"
    assert "trusted keys read again from" in caplog.text and "rules (2)" in caplog.text
    assert verify_signature(held, "concluded", None, b"v", by_old) == "rules"
    # The old key's file goes: refused once REREAD_S has passed, never by a failed check.
    (trusted_dir / "rules.pub").unlink()
    assert verify_signature(held, "concluded", None, b"v", by_old) == "rules"
    now[0] += keys.REREAD_S
    with pytest.raises(Unverified):
        verify_signature(held, "concluded", None, b"v", by_old)
    # A file broken mid-copy keeps the keys read before, and says so.
    (trusted_dir / "rules.2027-01.pub").write_bytes(b"half a key")
    now[0] += keys.REREAD_S
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=keys.__name__):
        assert verify_signature(held, "concluded", None, b"v", by_new) == "rules"
    assert "is not a PEM public key; the trusted keys read before are kept" in caplog.text


def test_keys_given_without_a_folder_are_never_read_again() -> None:
    pair = Ed25519PrivateKey.generate()
    now = [0.0]
    given = keys.TrustedKeys({"rules": (pair.public_key(),)}, clock=lambda: now[0])
    now[0] += keys.REREAD_S * 10
    assert given.current() is given.keys and not given.reread_after_failure()
