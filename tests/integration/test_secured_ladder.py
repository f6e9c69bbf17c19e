"""The whole ladder on the cluster users run: a SASL_SSL broker with an authorizer that
denies what no ACL allows, every stage its own principal holding only what
`groundstream acls` granted it, and the agent a principal of its own.

* Every candidate gets exactly one outcome, as on the open broker.
* The geometry principal is refused by the broker when it tries to write `state`: the
  gate is the broker's, not the stages' good manners.
* Each stage signs with its own key (`groundstream keys generate`): a conclusion for
  `state` the geometry principal writes to `concluded`, unsigned or signed with its own
  key, never reaches `state`; one naming a non-terminal topic is dead-lettered and the
  writer goes on, every candidate after it getting exactly one outcome.
* A wrong password, an untrusted broker certificate, a plaintext client on the TLS port
  and a missing ACL each end a command in one line that says what was refused.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.errors import TopicAuthorizationFailedError

from tests.faults.chaos import _terminal_id, audit, candidates, read_topic, wait_for_outcomes
from tests.fixtures.one_line import one_line
from topics import clients
from topics.codec import dumps, loads
from topics.conclusion import Conclusion
from topics.names import TERMINAL, Topic
from topics.schema import Envelope, candidate_from_dict
from topics.security.keys import load_signer
from topics.security.signatures import sign
from workers.bench.procs import free_port
from workers.runtime.ladder import STAGE_NAMES
from workers.runtime.settings import Settings

from .harness import (
    REPO_ROOT,
    BrokerStartError,
    LocalCluster,
    Workers,
    cli,
    groundstream,
    secure_broker,
)

N = 40
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
POLICY = FIXTURES / "ladder" / "policy.toml"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("secured")
    made = groundstream(dict(os.environ), "keys", "generate", "--out", str(root / "keys"))
    assert made.returncode == 0, made.stderr
    trusted = root / "trusted"  # the public keys only, as the writer's pod mounts them
    trusted.mkdir()
    for public in (root / "keys").glob("*.pub"):
        (trusted / public.name).write_bytes(public.read_bytes())
    try:
        with secure_broker(root / "kafka") as cluster:
            yield cluster
    except BrokerStartError as exc:
        pytest.fail(str(exc), pytrace=False)


def keys_of(cluster: LocalCluster) -> Path:
    """Every stage's key pair, made by `groundstream keys generate` (the `secure` fixture)."""
    return cluster.run_dir.parent / "keys"


def env_as(cluster: LocalCluster, user: str, prefix: str, data: Path, **extra: str) -> dict:
    """A process's environment as `user` on the secured broker: the admin's settings
    from local.sh's client.env, with this user's name and password file, its own signing
    key when it signs, and the stages' public keys."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSTREAM_")}
    env |= cluster.client_env()
    signs_as = "review" if user == "dashboard" else user  # a person's tool, with review's key
    own = keys_of(cluster) / f"{signs_as}.key"
    if own.exists():
        env["GROUNDSTREAM_SIGNING_KEY_FILE"] = str(own)
    env["GROUNDSTREAM_TRUSTED_KEYS_DIR"] = str(cluster.run_dir.parent / "trusted")
    env |= {
        "GROUNDSTREAM_KAFKA_SASL_USERNAME": user,
        "GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE": str(
            cluster.run_dir / "users" / f"{user}.password"
        ),
        "GROUNDSTREAM_TOPIC_PREFIX": prefix,
        "GROUNDSTREAM_PARTITIONS": "2",
        "GROUNDSTREAM_DATA_DIR": str(data),
        "GROUNDSTREAM_BATCH_WITHIN": "0.02",
        "GROUNDSTREAM_BATCH_SIZE": "16",
        "GROUNDSTREAM_POLICY": str(POLICY),
        "GROUNDSTREAM_LOG_LEVEL": "info",
        "PYTHONPATH": str(REPO_ROOT),
    }
    return env | extra


@pytest.fixture(scope="module")
def ladder(secure: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Topics made and ACLs granted by the admin; then every stage as its own principal,
    each holding only what `groundstream acls --stage NAME` granted it."""
    tmp = tmp_path_factory.mktemp("ladder")
    prefix = f"sec-{uuid.uuid4().hex[:8]}."
    admin = env_as(secure, "admin", prefix, tmp / "data")
    source = f"{prefix}answers"
    cli(admin, "topics", "create", "--also", source)
    for stage in (*STAGE_NAMES, "review", "dashboard", "client"):
        cli(admin, "acls", "--stage", stage, "--principal", f"User:{stage}", "--apply")
    cli(
        admin,
        "acls",
        "--stage",
        "attach",
        "--source",
        source,
        "--principal",
        "User:attach",
        "--apply",
    )
    workers = [
        Workers(env_as(secure, stage, prefix, tmp / "data"), stage, tmp / f"{stage}.log")
        for stage in STAGE_NAMES
    ]
    try:
        for w in workers:
            w.start()
        yield {"prefix": prefix, "tmp": tmp, "admin": admin, "source": source}
    finally:
        for w in workers:
            w.stop()


def test_every_stage_as_its_own_principal_gives_every_candidate_one_outcome(
    secure: LocalCluster, ladder: dict
) -> None:
    prefix = ladder["prefix"]
    batch = candidates(N, sessions=10)
    client = Settings.from_env(env_as(secure, "client", prefix, ladder["tmp"] / "data"))

    asyncio.run(produce_candidates(client, batch))
    ids = [cid for cid, _, _ in batch]
    kafka = secure.client_kwargs("admin")
    got = asyncio.run(wait_for_outcomes(secure.bootstrap, prefix, ids, 180, **kafka))
    assert got == N
    figures = asyncio.run(audit(secure.bootstrap, prefix, ids, **kafka))
    print(figures.render())
    figures.assert_exactly_once()


async def produce_candidates(client: Settings, batch: list) -> None:
    """`batch` onto `candidates` as the agent's principal, which may write only candidates."""
    producer = clients.producer(client.kafka(), acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for _cid, key, value in batch:
            await producer.send(client.topic(Topic.CANDIDATES), value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


def forged(cid: str, topic: str) -> Conclusion:
    """A conclusion a taken-over geometry pod might write: its candidate to `topic`."""
    body = {"id": cid, "session_id": f"s-{cid}", "question": "Q?", "response": "A."}
    value = Envelope(candidate_from_dict(body), route="default", mode="evaluate").encode()
    outcome = {"candidate_id": cid, "stage": "outcome", "topic": topic, "action": "accept"}
    return Conclusion(cid, topic, f"s-{cid}".encode(), value, outcome)


def test_the_geometry_principal_cannot_conclude_to_state_nor_stop_the_writer(
    secure: LocalCluster, ladder: dict
) -> None:
    prefix = ladder["prefix"]
    as_geometry = Settings.from_env(env_as(secure, "geometry", prefix, ladder["tmp"] / "data"))
    own_key = load_signer(keys_of(secure) / "geometry.key", "geometry")
    attempts = [
        (forged("forged-unsigned", "state"), None),
        (forged("forged-own-key", "state"), own_key),
        (forged("forged-inner", "candidates"), own_key),
    ]
    batch = [
        (f"after-{cid}", key, dumps(loads(value) | {"id": f"after-{cid}"}))
        for cid, key, value in candidates(20, sessions=5)
    ]
    client = Settings.from_env(env_as(secure, "client", prefix, ladder["tmp"] / "data"))

    async def write() -> None:
        producer = clients.producer(as_geometry.kafka(), acks="all")
        await producer.start()
        try:  # geometry may write `concluded` (it concludes dead letters and escalations)
            for c, signer in attempts:
                headers = c.wire_headers()
                if signer is not None:
                    headers = sign(signer, "concluded", c.wire_key(), c.value, headers)
                await producer.send_and_wait(
                    as_geometry.topic(Topic.CONCLUDED), c.value, key=c.wire_key(),
                    headers=list(headers),
                )  # fmt: skip
        finally:
            await producer.stop()
        await produce_candidates(client, batch)

    asyncio.run(write())
    ids = [cid for cid, _, _ in batch]
    kafka = secure.client_kwargs("admin")
    assert asyncio.run(wait_for_outcomes(secure.bootstrap, prefix, ids, 180, **kafka)) == 20

    def read(topic: Topic) -> list:
        return asyncio.run(read_topic(secure.bootstrap, topic.full(prefix), **kafka))

    on_state = {loads(r.value)["candidate"]["id"] for r in read(Topic.STATE)}
    assert not {c.candidate_id for c, _ in attempts} & on_state
    refused = sorted(
        dict(r.headers)["gs-reason"].decode()
        for r in read(Topic.DEADLETTER)
        if dict(r.headers).get("gs-stage") == b"terminal"
    )
    assert refused == [
        "conclusion refused: conclusion names 'candidates', not a terminal topic",
        "conclusion refused: geometry may not conclude to state",
        "conclusion refused: unsigned",
    ]
    # Every candidate produced after them: exactly one outcome, on exactly one topic.
    outcomes: dict[str, list[str]] = {cid: [] for cid in ids}
    for r in read(Topic.DECISIONS):
        record = loads(r.value)
        if record["stage"] == "outcome" and record["candidate_id"] in outcomes:
            outcomes[record["candidate_id"]].append(record["topic"])
    assert all(len(topics) == 1 for topics in outcomes.values()), outcomes
    placed = [
        cid
        for topic in TERMINAL
        for r in read(topic)
        if (cid := _terminal_id(topic, r.value, list(r.headers or ()))) in outcomes
    ]
    assert sorted(placed) == sorted(ids)


def test_the_broker_refuses_the_geometry_principal_a_write_to_state(
    secure: LocalCluster, ladder: dict
) -> None:
    settings = Settings.from_env(env_as(secure, "geometry", ladder["prefix"], ladder["tmp"]))

    async def forge() -> None:
        producer = clients.producer(settings.kafka(), acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(settings.topic(Topic.STATE), b'{"forged": true}')
        finally:
            await producer.stop()

    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(forge())

    # The same principal may write what geometry writes.
    async def scored() -> None:
        producer = clients.producer(settings.kafka(), acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(settings.topic(Topic.SCORED), b"{}", key=b"k")
        finally:
            await producer.stop()

    asyncio.run(scored())


def test_each_refusal_is_one_line_naming_what_was_refused(
    secure: LocalCluster, ladder: dict, tmp_path: Path
) -> None:
    prefix = ladder["prefix"]
    as_rules = env_as(secure, "rules", prefix, tmp_path)
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    line = one_line(
        groundstream(
            as_rules | {"GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE": str(wrong)}, "topics", "create"
        )
    )
    assert "refused user 'rules'" in line and "SCRAM-SHA-512" in line, line
    assert "not-the-password" not in line

    other_ca = FIXTURES / "tls" / "client.crt"  # a self-signed certificate: not its CA
    line = one_line(
        groundstream(
            as_rules | {"GROUNDSTREAM_KAFKA_SSL_CA_FILE": str(other_ca)}, "topics", "create"
        )
    )
    assert "is not trusted" in line and "GROUNDSTREAM_KAFKA_SSL_CA_FILE" in line, line

    plaintext = {k: v for k, v in as_rules.items() if not k.startswith("GROUNDSTREAM_KAFKA_")}
    line = one_line(groundstream(plaintext, "topics", "create"))
    assert "GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL" in line and "TLS" in line, line

    # rules holds its own ACLs only: the switch's input is not its to read.
    line = one_line(groundstream(as_rules, "consume", "scored", "--timeout", "5"))
    assert "refused User:rules" in line and "groundstream acls" in line, line


def test_a_worker_whose_principal_lacks_its_acls_stops_at_start_up_in_one_line(
    secure: LocalCluster, ladder: dict, tmp_path: Path
) -> None:
    """The recorder's principal was granted nothing (in this module): as the rules stage
    it may not even see the ladder's topics."""
    rules_key = str(keys_of(secure) / "rules.key")  # a key, so the ACLs are what is refused
    as_recorder = env_as(
        secure, "recorder", ladder["prefix"], tmp_path, GROUNDSTREAM_SIGNING_KEY_FILE=rules_key
    )
    line = one_line(groundstream(as_recorder, "worker", "rules"))
    assert "User:recorder" in line and "groundstream acls --stage rules" in line, line


def test_review_dashboard_and_attach_run_as_their_own_principals(
    secure: LocalCluster, ladder: dict, tmp_path: Path
) -> None:
    prefix, source = ladder["prefix"], ladder["source"]
    listed = groundstream(env_as(secure, "review", prefix, tmp_path), "review", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    parked = [loads(line) for line in listed.stdout.splitlines()]  # one JSON line each
    assert all(item["candidate_id"] for item in parked), parked

    admin = Settings.from_env(ladder["admin"])

    async def answers() -> None:  # what the user's own topic carries: not all candidates
        producer = clients.producer(admin.kafka(), acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(source, b'{"object": "not a chat completion"}')
            await producer.send_and_wait(source, b"{not json")
        finally:
            await producer.stop()

    asyncio.run(answers())
    as_attach = env_as(secure, "attach", prefix, tmp_path)
    ran = groundstream(
        as_attach, "attach", "--source", source, "--preset", "openai-chat", "--until-idle", "3"
    )
    assert ran.returncode == 0, ran.stderr
    counts = dict(p.split("=") for p in ran.stderr.strip().splitlines()[-1].split()[1:])
    assert sum(int(counts[k]) for k in ("candidates", "pass_through", "deadletter")) == 2, counts

    port = free_port()
    as_dashboard = env_as(secure, "dashboard", prefix, tmp_path, GROUNDSTREAM_WEB_PORT=str(port))
    log = (tmp_path / "dashboard.log").open("wb")
    dashboard = subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "dashboard"],
        env=as_dashboard, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        records = 0
        deadline = time.monotonic() + 90
        while records == 0 and time.monotonic() < deadline:
            assert dashboard.poll() is None, (tmp_path / "dashboard.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/decisions") as r:
                    records = loads(r.read())["records"]
            except OSError:
                pass
            time.sleep(1)
        assert records > 0, (tmp_path / "dashboard.log").read_text()  # the feed reads decisions
    finally:
        dashboard.terminate()
        dashboard.wait(30)
        log.close()


def test_the_topics_job_creates_with_its_own_acls_and_a_stage_only_lists(
    secure: LocalCluster, tmp_path: Path
) -> None:
    """deploy/k8s: the Job runs `topics create` as `topics` (Create and Describe on each
    topic); each worker pod's init container runs it as the stage's principal, which may
    not create. Before the Job, the init container is refused (it fails and is retried:
    not reported as `created`); once the topics exist it only lists them."""
    prefix = f"job-{uuid.uuid4().hex[:8]}."
    admin = env_as(secure, "admin", prefix, tmp_path)
    for stage in ("topics", "rules"):
        cli(admin, "acls", "--stage", stage, "--principal", f"User:{stage}", "--apply")
    as_rules = env_as(secure, "rules", prefix, tmp_path)
    refused = one_line(groundstream(as_rules, "topics", "create"))
    assert "refused User:rules access to topic" in refused
    assert "TopicAuthorizationFailedError" in refused
    made = cli(env_as(secure, "topics", prefix, tmp_path), "topics", "create")
    assert made.stdout.count("created ") == len(Topic)
    listed = cli(as_rules, "topics", "create")
    assert listed.stdout.count("exists ") == len(Topic)
