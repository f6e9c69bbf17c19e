"""`groundstream acls`: each principal's bindings (least privilege, read off the code's
tables), the prefix, both output formats, and the CreateAcls request `--apply` sends."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from aiokafka.protocol.admin import CreateAclsRequest_v1
from click.testing import CliRunner

from pipeline.policy.document import load_policy
from topics.names import TERMINAL, TOPIC_SPECS, Topic
from workers.cli import main
from workers.interfaces import StageContext
from workers.runtime import acls
from workers.runtime.acls import (
    STAGES,
    AclBinding,
    AclsRefused,
    CreateAcls,
    Names,
    Operation,
    PatternType,
    ResourceType,
    bindings,
    check_created,
    kafka_acls,
    kafka_user,
    yaml_text,
)
from workers.runtime.loop import StageLoop
from workers.runtime.settings import Settings
from workers.runtime.telemetry import StageTelemetry
from workers.stages.geometry import GeometryStage

T = Topic
# What each principal reads and writes, spelled out here on purpose: the module derives
# them from the ladder, the routing table and the stages, and a change there that moves
# a principal's rights must show up as a change of this table.
READS: dict[str, set[Topic]] = {
    "geometry": {T.CANDIDATES, T.CONTROL},
    "switch": {T.SCORED, T.DECISIONS, T.SESSIONS, T.CONTROL},
    "consistency": {T.CONSISTENCY, T.CONTROL},
    "judge": {T.JUDGE, T.JUDGE_LEDGER, T.CONTROL},
    "rules": {T.RULES, T.CONTROL},
    "terminal": {T.CONCLUDED, T.OUTCOMES, T.CONTROL},
    "recorder": {T.DECISIONS, T.AUDIT_HEADS, T.CONTROL},
    "review": {T.DECISIONS, T.CONTROL, T.REVIEW, T.CANDIDATES},
    "dashboard": {T.DECISIONS, T.CONTROL, T.REVIEW},
    "attach": {T.CANDIDATES, T.DEADLETTER},  # the ids already there; and its SOURCE
    "client": {T.OUTCOMES, T.STATE},
    "topics": set(),
}
WRITES: dict[str, set[Topic]] = {
    "geometry": {T.SCORED, T.DECISIONS, T.CONCLUDED},
    "switch": {T.RULES, T.CONSISTENCY, T.JUDGE, T.DECISIONS, T.CONCLUDED, T.SESSIONS},
    "consistency": {T.RULES, T.JUDGE, T.DECISIONS, T.CONCLUDED},
    "judge": {T.RULES, T.DECISIONS, T.CONCLUDED, T.JUDGE_LEDGER},
    "rules": {T.DECISIONS, T.CONCLUDED},
    "terminal": {*TERMINAL, T.DECISIONS, T.OUTCOMES},
    "recorder": {T.AUDIT, T.DECISIONS_PUBLIC, T.AUDIT_HEADS},
    "review": {T.CONTROL, T.DECISIONS, T.CONCLUDED, T.RULES},
    "dashboard": {T.CONTROL, T.DECISIONS, T.CONCLUDED, T.RULES},
    "attach": {T.CANDIDATES, T.DEADLETTER, T.DECISIONS},  # and its pass-through topic
    "client": {T.CANDIDATES},
    "topics": set(),
}
SOURCE = "answers"
"""`attach`'s source topic in these tests: the user's own, never prefixed."""
LOOPS = ("geometry", "switch", "consistency", "judge", "rules", "terminal", "recorder")
"""The principals that run a `StageLoop`: a group and transactional ids of their own."""


def topics(acl: list[AclBinding], op: Operation, prefix: str = "") -> set[Topic]:
    """The ladder's topics among `acl`'s topic bindings for `op` (not the user's own)."""
    named = {
        b.name.removeprefix(prefix)
        for b in acl
        if b.resource_type is ResourceType.TOPIC and b.operation is op
    }
    return {t for t in Topic if t.value in named}


def of(acl: list[AclBinding], kind: ResourceType) -> list[AclBinding]:
    return [b for b in acl if b.resource_type is kind]


def test_every_stage_has_a_row_here() -> None:
    assert set(STAGES) == set(READS) == set(WRITES)


@pytest.mark.parametrize("stage", STAGES)
def test_reads_and_writes_exactly_what_the_code_does(stage: str) -> None:
    acl = bindings(stage, f"User:{stage}", Names(source=SOURCE))
    assert topics(acl, Operation.READ) == READS[stage]
    assert topics(acl, Operation.WRITE) == WRITES[stage]
    assert all(b.principal == f"User:{stage}" and b.host == "*" for b in acl)
    assert all(b.permission is acls.Permission.ALLOW for b in acl)
    assert len(set(acl)) == len(acl) and acl == sorted(acl)


def test_only_the_terminal_writer_writes_state_the_terminal_topics_and_the_ledger() -> None:
    for stage in STAGES:
        written = topics(bindings(stage, "User:x", Names(source=SOURCE)), Operation.WRITE)
        delivered = written & {*TERMINAL, T.OUTCOMES}
        expected = {
            "terminal": {*TERMINAL, T.OUTCOMES},
            "attach": {T.DEADLETTER},  # what it cannot map, with its outcome: no writer follows
        }
        assert delivered == expected.get(stage, set()), stage


def test_geometry_in_full() -> None:
    acl = bindings("geometry", "User:geometry", Names())
    assert T.STATE not in topics(acl, Operation.WRITE)
    assert [(b.pattern_type, b.name, b.operation) for b in of(acl, ResourceType.GROUP)] == [
        (PatternType.LITERAL, "groundstream-geometry", Operation.READ)
    ]
    txn = of(acl, ResourceType.TRANSACTIONAL_ID)
    assert [(b.pattern_type, b.name, b.operation) for b in txn] == [
        (PatternType.PREFIXED, "groundstream-geometry.", Operation.WRITE),
        (PatternType.PREFIXED, "groundstream-geometry.", Operation.DESCRIBE),
    ]
    assert [(b.name, b.operation) for b in of(acl, ResourceType.CLUSTER)] == [
        ("kafka-cluster", Operation.IDEMPOTENT_WRITE)
    ]


@pytest.mark.parametrize("stage", LOOPS)
def test_a_loop_describes_every_topic_for_its_start_up_check(stage: str) -> None:
    """`require_topics` lists the cluster's topics: only those it may Describe appear; its
    pod's init container (`topics create`) reads the settings of each (DescribeConfigs)."""
    acl = bindings(stage, "User:x", Names())
    assert topics(acl, Operation.DESCRIBE) == {spec.topic for spec in TOPIC_SPECS}
    assert topics(acl, Operation.DESCRIBE_CONFIGS) == {spec.topic for spec in TOPIC_SPECS}
    assert len(of(acl, ResourceType.GROUP)) == 1


def test_the_client_writes_candidates_only_in_no_group_and_no_transaction() -> None:
    acl = bindings("client", "User:agent", Names())
    assert topics(acl, Operation.DESCRIBE) == {T.CANDIDATES, T.OUTCOMES, T.STATE}
    assert not of(acl, ResourceType.GROUP) and not of(acl, ResourceType.TRANSACTIONAL_ID)
    assert [b.operation for b in of(acl, ResourceType.CLUSTER)] == [Operation.IDEMPOTENT_WRITE]


def test_review_routes_under_its_own_transactional_prefix_in_no_group() -> None:
    acl = bindings("review", "User:ana", Names("p."))
    assert not of(acl, ResourceType.GROUP)
    assert {(b.name, b.pattern_type) for b in of(acl, ResourceType.TRANSACTIONAL_ID)} == {
        ("p.groundstream-review-", PatternType.PREFIXED)
    }


def test_the_prefix_names_every_topic_group_and_transactional_id() -> None:
    for stage in STAGES:
        acl = bindings(stage, "User:x", Names("t1.", SOURCE))
        named = [
            b
            for b in acl
            if b.resource_type is not ResourceType.CLUSTER
            and not b.name.startswith(SOURCE)  # the user's own topics keep their names
        ]
        assert all(b.name.startswith("t1.") for b in named), stage
        assert topics(acl, Operation.WRITE, "t1.") == WRITES[stage]


def test_the_group_and_transactional_prefix_are_the_loops_own(monkeypatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "node-1")
    settings = Settings(topic_prefix="t1.", instance_id="geo-2")
    loop = StageLoop(
        GeometryStage(),
        settings,
        StageContext(policy=load_policy(None)),
        StageTelemetry("geometry", "t1.candidates"),
    )
    acl = bindings("geometry", "User:geometry", Names.of(settings))
    (group,) = {b.name for b in of(acl, ResourceType.GROUP)}
    (transactional,) = {b.name for b in of(acl, ResourceType.TRANSACTIONAL_ID)}
    assert group == loop.group_id
    assert loop.member_id.startswith(transactional)
    other = bindings("geometry", "User:geometry", Names("t1"))  # prefixes do not collide
    assert not loop.member_id.startswith({b.name for b in of(other, ResourceType.GROUP)}.pop())


def test_a_malformed_principal_or_unknown_stage_is_refused() -> None:
    with pytest.raises(ValueError, match="expected Type:name"):
        bindings("geometry", "geometry", Names())
    with pytest.raises(KeyError):
        bindings("sorter", "User:x", Names())


# ------------------------------------------------------------------ formats --


def test_kafka_acls_lines_one_per_resource() -> None:
    acl = bindings("geometry", "User:geo-worker.acme_1", Names())
    lines = kafka_acls(acl, "kafka:9092")
    argv = [shlex.split(line) for line in lines]
    start = ["kafka-acls.sh", "--bootstrap-server", "kafka:9092", "--add"]
    assert all(a[:4] == start for a in argv)
    assert all(a[4:6] == ["--allow-principal", "User:geo-worker.acme_1"] for a in argv)
    assert len(lines) == len({(b.resource_type, b.name) for b in acl})
    candidates = next(a for a in argv if a[-2:] == ["--topic", "candidates"])
    assert candidates[6:-2] == [
        *("--operation", "Read", "--operation", "Describe"),
        *("--operation", "DescribeConfigs"),
    ]
    txn = next(a for a in argv if "--transactional-id" in a)
    assert txn[-4:] == [
        *("--transactional-id", "groundstream-geometry."),
        *("--resource-pattern-type", "prefixed"),
    ]
    cluster = next(a for a in argv if "--cluster" in a)
    assert cluster[-3:] == ["--operation", "IdempotentWrite", "--cluster"]
    group = next(a for a in argv if "--group" in a)
    assert group[-2:] == ["--group", "groundstream-geometry"]


def test_strimzi_kafka_user_reads_back() -> None:
    acl = bindings("geometry", "User:geometry", Names("p."))
    user = kafka_user(acl, "User:geometry", "prod")
    assert yaml.safe_load(yaml_text(user)) == user
    assert user["apiVersion"] == "kafka.strimzi.io/v1beta2" and user["kind"] == "KafkaUser"
    assert user["metadata"] == {"name": "geometry", "labels": {"strimzi.io/cluster": "prod"}}
    assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
    rules = user["spec"]["authorization"]["acls"]
    assert user["spec"]["authorization"]["type"] == "simple"
    by = {(r["resource"]["type"], r["resource"].get("name")): r for r in rules}
    assert by["topic", "p.candidates"]["operations"] == ["Read", "Describe", "DescribeConfigs"]
    assert by["topic", "p.candidates"]["resource"]["patternType"] == "literal"
    assert by["group", "p.groundstream-geometry"]["operations"] == ["Read"]
    assert by["transactionalId", "p.groundstream-geometry."]["resource"]["patternType"] == "prefix"
    assert by["cluster", None] == {
        "resource": {"type": "cluster"},
        "operations": ["IdempotentWrite"],
        "host": "*",
    }
    # Every binding is in a rule, once.
    assert sum(len(r["operations"]) for r in rules) == len(acl)


def test_strimzi_needs_a_user_with_a_kubernetes_name() -> None:
    for principal in ("User:Geo", "Group:geo", "User:CN=geo,O=acme"):
        with pytest.raises(ValueError, match="KafkaUser"):
            kafka_user([], principal, "c")


@pytest.mark.parametrize(
    "value",
    [
        {"a": ["*", "on", "no", "yes", "1.0", "null", "a: b", "# c", "- d", 'q"uote', "ü\nx"]},
        {"on": 1, "y": True, "n": None, "k.e/y": [], "e": {}, "z": [{"x": [1, 2.5, False]}]},
        [{"a": {"b": [{"c": "d"}]}}, "e", []],
    ],
)
def test_the_yaml_writer_reads_back_as_written(value: Any) -> None:
    assert yaml.safe_load(yaml_text(value)) == value


# -------------------------------------------------------------------- apply --


def test_the_create_acls_request_is_v1_with_every_binding() -> None:
    acl = bindings("client", "User:agent", Names("p."))
    struct = CreateAcls(acl).prepare({CreateAclsRequest_v1.API_KEY: (1, 3)})
    assert isinstance(struct, CreateAclsRequest_v1) and struct.API_KEY == 30
    decoded = CreateAclsRequest_v1.decode(struct.encode())
    assert decoded.creations == [
        (2, "p.candidates", 3, "User:agent", "*", 4, 3),  # TOPIC, LITERAL, WRITE, ALLOW
        (2, "p.candidates", 3, "User:agent", "*", 8, 3),  # DESCRIBE
        (2, "p.outcomes", 3, "User:agent", "*", 3, 3),  # READ
        (2, "p.outcomes", 3, "User:agent", "*", 8, 3),
        (2, "p.state", 3, "User:agent", "*", 3, 3),
        (2, "p.state", 3, "User:agent", "*", 8, 3),
        (4, "kafka-cluster", 3, "User:agent", "*", 12, 3),  # CLUSTER IDEMPOTENT_WRITE
    ]
    txn = bindings("review", "User:ana", Names())
    prefixed = CreateAcls(txn).prepare({30: (1, 1)}).creations
    assert (5, "groundstream-review-", 4, "User:ana", "*", 4, 3) in prefixed  # PREFIXED
    with pytest.raises(NotImplementedError):  # a broker older than 2.0: no pattern types
        CreateAcls(txn).prepare({30: (0, 0)})


def response(*codes: int) -> Any:
    return SimpleNamespace(creation_responses=[(c, "no authorizer" if c else None) for c in codes])


def test_a_refusal_is_one_line_naming_the_binding() -> None:
    acl = bindings("client", "User:agent", Names())
    check_created(acl, response(*[0] * len(acl)))
    with pytest.raises(AclsRefused) as refused:
        check_created(acl, response(0, 54, *[54] * (len(acl) - 2)))
    assert str(refused.value) == (
        f"the broker refused {len(acl) - 1} of {len(acl)} ACLs, first DESCRIBE on TOPIC"
        " candidates for User:agent: SecurityDisabled (no authorizer)"
    )
    with pytest.raises(AclsRefused, match="1 results for 7"):
        check_created(acl, response(0))


class FakeAdmin:
    def __init__(self, codes: list[int] | None = None) -> None:
        self.codes, self.sent, self.closed = codes, [], False

    async def start(self) -> None:
        return None

    async def _send_request(self, request: CreateAcls) -> Any:
        self.sent.append(request)
        return response(*(self.codes or [0] * len(request.acls)))

    async def close(self) -> None:
        self.closed = True


def run(*args: str) -> Any:
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("GROUNDSTREAM_")}
    env = {**clean, "GROUNDSTREAM_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    return CliRunner().invoke(main, ["acls", *args], env=env)


def test_the_command_prints_without_a_broker() -> None:
    done = run("--stage", "geometry", "--stage", "switch", "--principal", "User:geo")
    assert done.exit_code == 0, done.output
    union = {*bindings("geometry", "User:geo", Names()), *bindings("switch", "User:geo", Names())}
    assert done.stdout.splitlines() == kafka_acls(sorted(union), "127.0.0.1:1")
    strimzi = run("--stage", "client", "--principal", "User:agent", "--format", "strimzi")
    assert strimzi.exit_code == 0, strimzi.output
    user = yaml.safe_load(strimzi.stdout)
    assert user == kafka_user(bindings("client", "User:agent", Names()), "User:agent", "my-cluster")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("--stage", "sorter", "--principal", "User:x"), "--stage 'sorter'"),
        (("--stage", "rules", "--principal", "rules"), "--principal 'rules'"),
        (("--stage", "rules", "--principal", "User:R", "--format", "strimzi"), "--principal"),
    ],
)
def test_a_wrong_option_is_one_line_naming_it(args: tuple[str, ...], option: str) -> None:
    done = run(*args)
    assert done.exit_code == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith(f"Error: {option}")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("--principal", "User:*", "--source", "docs"), "--principal 'User:*': expected Type:"),
        (("--principal", "User:CN=g,O=a", "--source", "docs"), "--principal 'User:CN=g,O=a': "),
        (("--principal", "User:g w", "--source", "docs"), "--principal 'User:g w': expected"),
        (
            ("--principal", "User:a", "--source", "docs", "--pass-through", "*"),
            "--pass-through '*': expected a topic name of A-Z a-z 0-9 . _ - only, no wildcard",
        ),
        (("--principal", "User:a", "--source", "docs*"), "--source 'docs*': expected"),
        (("--principal", "User:a", "--source", "d/x"), "--source 'd/x': expected"),
    ],
)
def test_a_wildcard_or_odd_name_is_refused_before_apply(
    args: tuple[str, ...], line: str, monkeypatch
) -> None:
    """`User:*` or a pass-through of `*` would grant every user or every topic: refused in
    one line naming the value, and nothing is sent to the cluster."""
    admin = FakeAdmin()
    monkeypatch.setattr(acls, "admin_client", lambda settings: admin)
    done = run("--stage", "attach", *args, "--apply")
    assert done.exit_code == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith(f"Error: {line}"), done.stderr
    assert admin.sent == []


def test_apply_sends_one_request_and_closes(monkeypatch) -> None:
    admin = FakeAdmin()
    monkeypatch.setattr(acls, "admin_client", lambda settings: admin)
    done = run("--stage", "client", "--principal", "User:agent", "--apply")
    assert done.exit_code == 0, done.output
    assert done.stderr == "created 7 ACL bindings for User:agent\n"
    (request,) = admin.sent
    assert request.acls == tuple(bindings("client", "User:agent", Names())) and admin.closed


def test_apply_refused_is_one_line(monkeypatch) -> None:
    admin = FakeAdmin([31] * 7)  # ClusterAuthorizationFailed: not allowed to alter ACLs
    monkeypatch.setattr(acls, "admin_client", lambda settings: admin)
    done = run("--stage", "client", "--principal", "User:agent", "--apply")
    assert done.exit_code == 1 and done.stdout == ""
    assert done.stderr.startswith("groundstream: the broker refused 7 of 7 ACLs, first WRITE")
    assert "ClusterAuthorizationFailedError" in done.stderr and admin.closed


def acl_table() -> str:
    """docs/how-to/kubernetes.md's table, as `bindings` says it (the prefix left out)."""

    def names(acl: list[AclBinding], op: Operation) -> str:
        listed = [t for t in Topic if t in topics(acl, op)]
        return ", ".join(f"`{t.value}`" for t in listed) or "—"

    def named(acl: list[AclBinding], kind: ResourceType) -> str:
        return ", ".join(sorted({f"`{b.name}`" for b in of(acl, kind)})) or "—"

    rows = [
        "| `--stage` | Read | Write | Create | group (Read) | transactional ids, prefixed"
        " (Write, Describe) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for stage in STAGES:
        acl = bindings(stage, "User:x", Names(source=SOURCE))
        created = topics(acl, Operation.CREATE)
        ladder = {t.value for t in Topic}
        own = ["its pass-through"] * any(
            b.operation is Operation.CREATE and b.name not in ladder for b in acl
        )
        create = (
            "every topic"
            if created == set(Topic)
            else ", ".join([*(f"`{t.value}`" for t in Topic if t in created), *own]) or "—"
        )
        rows.append(
            f"| `{stage}` | {names(acl, Operation.READ)} | {names(acl, Operation.WRITE)}"
            f" | {create} | {named(acl, ResourceType.GROUP)}"
            f" | {named(acl, ResourceType.TRANSACTIONAL_ID)} |"
        )
    return "\n".join(rows) + "\n"


def test_the_kubernetes_page_table_is_what_the_command_grants() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "kubernetes.md"
    readme = page.read_text()
    unindented = "\n".join(line.strip() for line in readme.splitlines())
    assert acl_table() in unindented, acl_table()


def test_attach_reads_its_source_and_creates_and_writes_its_pass_through_only() -> None:
    acl = bindings("attach", "User:attach", Names("t1.", SOURCE))
    own = {(b.name, b.operation) for b in acl if b.name.startswith(SOURCE)}
    assert own == {
        (SOURCE, Operation.READ),
        (SOURCE, Operation.DESCRIBE),
        (f"{SOURCE}.passthrough", Operation.WRITE),
        (f"{SOURCE}.passthrough", Operation.CREATE),
        (f"{SOURCE}.passthrough", Operation.DESCRIBE),
    }
    assert [b.name for b in of(acl, ResourceType.GROUP)] == ["t1.groundstream-attach"]
    assert not of(acl, ResourceType.TRANSACTIONAL_ID)
    other = bindings("attach", "User:attach", Names(source=SOURCE, pass_through="mine"))
    assert ("mine", Operation.CREATE) in {(b.name, b.operation) for b in other}


def test_attach_without_its_source_is_one_line_naming_the_option() -> None:
    result = CliRunner().invoke(main, ["acls", "--stage", "attach", "--principal", "User:a"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: --stage attach needs --source, the topic it gates"
    ]


def test_the_topics_job_creates_and_describes_every_topic_and_nothing_else() -> None:
    """`topics create` (the Job, every worker's init container) lists the topics, reads
    the settings of those that exist and creates the missing ones: Create, Describe and
    DescribeConfigs on each by name, no cluster-wide Create, no group, no transactional
    id, no producer."""
    acl = bindings("topics", "User:topics", Names("p."))
    every = {spec.topic for spec in TOPIC_SPECS}
    assert topics(acl, Operation.CREATE, "p.") == every
    assert topics(acl, Operation.DESCRIBE, "p.") == every
    assert topics(acl, Operation.DESCRIBE_CONFIGS, "p.") == every
    assert {b.operation for b in acl} == {
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DESCRIBE_CONFIGS,
    }
    assert {b.resource_type for b in acl} == {ResourceType.TOPIC}
    assert all(b.pattern_type is PatternType.LITERAL and b.name.startswith("p.") for b in acl)
