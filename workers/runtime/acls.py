"""The Kafka ACLs each groundstream principal needs, derived from the code's own tables.

`bindings(stage, principal, names)` is pure (no Kafka): the exact ACL bindings a principal
running `stage` needs, least privilege, each read off what the code does rather than
restated:

* a rung of the ladder (`LADDER`) reads its stage's `source`, what its row `follows`, its
  changelog (restored at assignment), and the control topic (`StageLoop.run` starts a
  `ControlListener` for every stage, without a group); it writes `decisions`, its
  changelog, the non-terminal topics of its row in the routing table (`ROUTES`), and
  `concluded` for everything terminal (`kit.conclude`, `kit.deadletter`): only the
  terminal writer writes `TERMINAL` topics (`state` among them) and the `outcomes` ledger;
* every `StageLoop` (the rungs, the terminal writer, the recorder) consumes in its group
  `group_id(prefix, stage)` (Read on the group), writes with a transactional id starting
  `member_prefix(prefix, stage)` (Write and Describe on that prefix), and, started by the
  CLI, first checks every topic of `TOPIC_SPECS` exists (`require_topics`: a metadata
  request lists only topics the principal may Describe);
* `review` (the CLI) and `dashboard` read the queue (`decisions`, `control`,
  `escalations.review`) without a group, append claims to `control`, and route a verdict in
  a transaction under `review.transactional_prefix`; `review export` also reads
  `candidates`; the dashboard also follows `decisions` and `control` and flips the kill
  switch on `control`;
* `client` (`workers.clients.agent`) writes `candidates` and reads, without a group, the
  `outcomes` ledger it awaits outcomes on and `state` (`accepted`);
* `topics` (`groundstream topics create`, as the Kubernetes Job runs it) lists the topics
  (Describe), checks the settings of those that exist (DescribeConfigs) and creates those
  missing (Create on each topic by name, not on the cluster): no group, no producer,
  nothing read or written. A worker pod's init container runs the same command as its
  stage, whose Describe and DescribeConfigs suffice once the topics exist (before, it is
  refused and retried).

Every producer here is idempotent or transactional: IdempotentWrite on the cluster is
granted with it. Kafka 3.0+ no longer requires it of an idempotent producer whose
principal may Write a topic (KIP-679), older brokers do. Read and Write imply Describe;
it is granted explicitly on every topic touched anyway, so the list reads the same
whichever broker checks it. No binding is DENY, and none is on a wildcard.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from typing import TYPE_CHECKING, Any

from aiokafka.errors import for_code
from aiokafka.protocol.admin import CreateAclsRequest_v1
from aiokafka.protocol.api import Request

from pipeline.errors import GroundstreamError
from topics import clients
from topics.names import TERMINAL, TOPIC_SPECS, Topic
from workers.runtime.attach import STAGE as ATTACH
from workers.runtime.attach import pass_through_topic
from workers.runtime.ladder import LADDER, STAGE_NAMES, StageRow
from workers.runtime.loop import group_id, member_prefix
from workers.runtime.review import transactional_prefix
from workers.runtime.settings import Settings
from workers.stages.recorder import RecorderStage

if TYPE_CHECKING:
    from aiokafka.admin import AIOKafkaAdminClient
from workers.stages.review import REVIEW_STAGE
from workers.stages.routes import ROUTES
from workers.stages.terminal import TerminalStage


class ResourceType(IntEnum):
    """Kafka's resource types (the protocol's codes)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(IntEnum):
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    READ = 3
    WRITE = 4
    CREATE = 5
    DESCRIBE = 8
    DESCRIBE_CONFIGS = 10
    IDEMPOTENT_WRITE = 12


class Permission(IntEnum):
    ALLOW = 3


CLUSTER = "kafka-cluster"
"""The one name of the cluster resource."""
CLIENT, DASHBOARD, TOPICS = "client", "dashboard", "topics"
STAGES: tuple[str, ...] = (
    *(*STAGE_NAMES, RecorderStage.name, REVIEW_STAGE, DASHBOARD, ATTACH, CLIENT, TOPICS),
)
"""Every name `bindings` knows: the ladder's six, the recorder, review, dashboard, attach,
client, and `topics` (who runs `topics create`)."""
PRINCIPAL = re.compile(r"[A-Za-z][A-Za-z0-9_-]*:[A-Za-z0-9._-]+")
"""`Type:name`, as Kafka's authorizer writes principals (User:geometry). The name is plain
on purpose: `User:*` is every user to Kafka, and a certificate's DN (`User:CN=…,O=…`) is
mapped to a short name by the broker's `ssl.principal.mapping.rules`."""
NAME = re.compile(r"[A-Za-z0-9._-]+")
"""A topic name `acls` binds: Kafka's own topic characters, so never the wildcard `*`,
which would grant the principal every topic."""


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ALLOW rule, in the protocol's terms."""

    resource_type: ResourceType
    pattern_type: PatternType
    name: str
    operation: Operation
    principal: str
    permission: Permission = Permission.ALLOW
    host: str = "*"


@dataclass(frozen=True, slots=True)
class Names:
    """The settings-derived names the bindings are made of."""

    prefix: str = ""
    """GROUNDSTREAM_TOPIC_PREFIX: of every topic, group and transactional id."""
    source: str | None = None
    """`attach`'s source topic, by its full name (the user's namespace, no prefix)."""
    pass_through: str | None = None
    """Where `attach` sends what is not a candidate (default: beside the source)."""

    @classmethod
    def of(
        cls, settings: Settings, source: str | None = None, pass_through: str | None = None
    ) -> Names:
        return cls(settings.topic_prefix, source, pass_through)

    def topic(self, topic: Topic) -> str:
        return topic.full(self.prefix)

    def group(self, stage: str) -> str:
        return group_id(self.prefix, stage)

    def transactional(self, stage: str) -> str:
        return member_prefix(self.prefix, stage)

    def review_transactional(self) -> str:
        return transactional_prefix(self.prefix)


@dataclass(frozen=True, slots=True)
class Needs:
    """What one principal does with Kafka, before it is spelled as bindings."""

    reads: frozenset[Topic] = frozenset()
    writes: frozenset[Topic] = frozenset()
    describes: frozenset[Topic] = frozenset()
    creates: frozenset[Topic] = frozenset()
    configs: frozenset[Topic] = frozenset()
    """Topics whose settings it reads (DescribeConfigs): `topics create` checks those of
    the topics that exist already."""
    group: str | None = None
    """Its consumer group (Read), when it consumes in one."""
    transactional: str | None = None
    """What its transactional ids start with (Write, Describe), when it has any."""
    idempotent: bool = False
    own_reads: frozenset[str] = frozenset()
    """Topics of the user's own namespace, by full name (`attach`'s source)."""
    own_writes: frozenset[str] = frozenset()
    own_creates: frozenset[str] = frozenset()

    def __or__(self, other: Needs) -> Needs:
        if None not in (self.group, other.group) and self.group != other.group:
            raise ValueError("two consumer groups in one principal's needs")
        return Needs(
            self.reads | other.reads,
            self.writes | other.writes,
            self.describes | other.describes,
            self.creates | other.creates,
            self.configs | other.configs,
            self.group or other.group,
            self.transactional or other.transactional,
            self.idempotent or other.idempotent,
            self.own_reads | other.own_reads,
            self.own_writes | other.own_writes,
            self.own_creates | other.own_creates,
        )


EVERY_TOPIC = frozenset(spec.topic for spec in TOPIC_SPECS)
"""What `require_topics` lists, as every service the CLI starts does first."""


@cache
def _source(row: StageRow) -> Topic:
    """A rung's source topic: a class constant of its stage, read off a stage built from
    default settings (building one opens nothing)."""
    return row.build(Settings()).source


def _loop(stage: str, names: Names) -> Needs:
    """What every `StageLoop` started by the CLI needs: its group, its transactional
    ids, the control topic, and every topic described (`require_topics`) with its settings
    (its pod's init container runs `topics create`, which checks them)."""
    return Needs(
        reads=frozenset({Topic.CONTROL}),
        describes=EVERY_TOPIC,
        configs=EVERY_TOPIC,
        group=names.group(stage),
        transactional=names.transactional(stage),
        idempotent=True,
    )


def _rung(row: StageRow, names: Names) -> Needs:
    table = frozenset({row.changelog} if row.changelog is not None else ())
    if row.name == TerminalStage.name:
        outputs = frozenset(TERMINAL)  # the one writer of every terminal topic
    else:
        routed = ROUTES[row.name].values()
        outputs = frozenset({Topic.CONCLUDED, *(t for t in routed if t not in TERMINAL)})
    return _loop(row.name, names) | Needs(
        reads=frozenset({_source(row), *row.follows}) | table,
        writes=frozenset({Topic.DECISIONS}) | outputs | table,
    )


def _recorder(names: Names) -> Needs:
    table = frozenset({RecorderStage.table})
    return _loop(RecorderStage.name, names) | Needs(
        reads=frozenset({RecorderStage.source}) | table,
        writes=frozenset(RecorderStage.outputs) | table,
    )


def _review_queue(names: Names) -> Needs:
    """`workers.runtime.review`: list (decisions, claims on control, the review topic),
    claim (control), route (the review rung's row of `ROUTES`, in one transaction)."""
    routed = ROUTES[REVIEW_STAGE].values()
    return Needs(
        reads=frozenset({Topic.DECISIONS, Topic.CONTROL, Topic.REVIEW}),
        writes=frozenset(
            {Topic.CONTROL, Topic.DECISIONS, Topic.CONCLUDED}
            | {t for t in routed if t not in TERMINAL}
        ),
        transactional=names.review_transactional(),
        idempotent=True,
    )


def _attach(names: Names) -> Needs:
    """`workers.runtime.attach`: the source in its group, the ids already on `candidates`
    and `deadletter`, candidates out, and its own dead letters (with their records) and
    pass-through messages, the pass-through topic created when missing."""
    if names.source is None:
        raise ValueError("--stage attach needs --source, the topic it gates")
    target = names.pass_through or pass_through_topic(names.source)
    return Needs(
        reads=frozenset({Topic.CANDIDATES, Topic.DEADLETTER}),
        writes=frozenset({Topic.CANDIDATES, Topic.DEADLETTER, Topic.DECISIONS}),
        group=names.group(ATTACH),
        idempotent=True,
        own_reads=frozenset({names.source}),
        own_writes=frozenset({target}),
        own_creates=frozenset({target}),
    )


def needs(stage: str, names: Names) -> Needs:
    """What `stage` (one of `STAGES`) does with Kafka; KeyError for an unknown one."""
    for row in LADDER:
        if row.name == stage:
            return _rung(row, names)
    if stage == RecorderStage.name:
        return _recorder(names)
    if stage == REVIEW_STAGE:  # `review export` reads the candidates it labels
        return _review_queue(names) | Needs(reads=frozenset({Topic.CANDIDATES}))
    if stage == DASHBOARD:  # the feed (decisions, control) and the kill switch (control)
        return _review_queue(names) | Needs(
            reads=frozenset({Topic.DECISIONS, Topic.CONTROL}),
            writes=frozenset({Topic.CONTROL}),
            describes=EVERY_TOPIC,  # `require_broker` at start-up
        )
    if stage == ATTACH:
        return _attach(names)
    if stage == CLIENT:
        return Needs(
            reads=frozenset({Topic.OUTCOMES, Topic.STATE}),
            writes=frozenset({Topic.CANDIDATES}),
            idempotent=True,
        )
    if stage == TOPICS:  # `topics.admin.create_topics`: list, check what exists, create the rest
        return Needs(describes=EVERY_TOPIC, creates=EVERY_TOPIC, configs=EVERY_TOPIC)
    raise KeyError(stage)


def check_names(principal: str, names: Names) -> None:
    """ValueError, one line naming the option and its value, for a principal or a topic
    name that is a wildcard or holds more than A-Z a-z 0-9 . _ - (bindings are applied as
    given: `User:*` or a pass-through of `*` would grant every user or every topic)."""
    if not PRINCIPAL.fullmatch(principal):
        raise ValueError(
            f"--principal {principal!r}: expected Type:name with the name of A-Z a-z 0-9 . _ -"
            " only, no wildcard (e.g. User:geometry; map a certificate's DN to such a name with"
            " the broker's ssl.principal.mapping.rules)"
        )
    for option, value in (("--source", names.source), ("--pass-through", names.pass_through)):
        if value is not None and not NAME.fullmatch(value):
            raise ValueError(
                f"{option} {value!r}: expected a topic name of A-Z a-z 0-9 . _ - only, no wildcard"
            )


def bindings(stage: str, principal: str, names: Names) -> list[AclBinding]:
    """The exact ALLOW bindings `principal` needs to run `stage`, sorted; KeyError for an
    unknown stage, ValueError for a principal or topic name `check_names` refuses."""
    check_names(principal, names)
    n = needs(stage, names)
    out: set[AclBinding] = set()

    def add(kind: ResourceType, name: str, op: Operation, pattern=PatternType.LITERAL) -> None:
        out.add(AclBinding(kind, pattern, name, op, principal))

    for topic in n.reads:
        add(ResourceType.TOPIC, names.topic(topic), Operation.READ)
    for topic in n.writes:
        add(ResourceType.TOPIC, names.topic(topic), Operation.WRITE)
    for topic in n.creates:
        add(ResourceType.TOPIC, names.topic(topic), Operation.CREATE)
    for topic in n.reads | n.writes | n.describes | n.creates:
        add(ResourceType.TOPIC, names.topic(topic), Operation.DESCRIBE)
    for topic in n.configs:
        add(ResourceType.TOPIC, names.topic(topic), Operation.DESCRIBE_CONFIGS)
    for name in n.own_reads:
        add(ResourceType.TOPIC, name, Operation.READ)
    for name in n.own_writes:
        add(ResourceType.TOPIC, name, Operation.WRITE)
    for name in n.own_creates:
        add(ResourceType.TOPIC, name, Operation.CREATE)
    for name in n.own_reads | n.own_writes:
        add(ResourceType.TOPIC, name, Operation.DESCRIBE)
    if n.group is not None:
        add(ResourceType.GROUP, n.group, Operation.READ)
    if n.transactional is not None:
        for op in (Operation.WRITE, Operation.DESCRIBE):
            add(ResourceType.TRANSACTIONAL_ID, n.transactional, op, PatternType.PREFIXED)
    if n.idempotent:
        # Kafka < 3.0 refuses an idempotent producer without it (KIP-679 dropped that).
        add(ResourceType.CLUSTER, CLUSTER, Operation.IDEMPOTENT_WRITE)
    return sorted(out)


def for_stages(stages: Iterable[str], principal: str, names: Names) -> list[AclBinding]:
    """The union of `bindings` for several stages run by one principal, sorted."""
    return sorted({b for stage in stages for b in bindings(stage, principal, names)})


def grouped(acls: Sequence[AclBinding]) -> list[tuple[AclBinding, list[Operation]]]:
    """Bindings of one resource, pattern, principal and host together: the first of each
    and all their operations, in order (one `kafka-acls.sh` line, one Strimzi rule)."""
    out: dict[tuple, tuple[AclBinding, list[Operation]]] = {}
    for b in sorted(acls):
        key = (b.resource_type, b.pattern_type, b.name, b.principal, b.host, b.permission)
        out.setdefault(key, (b, []))[1].append(b.operation)
    return list(out.values())


# ------------------------------------------------------------------ formats --

_KAFKA_ACLS_OPERATION = {
    Operation.READ: "Read",
    Operation.WRITE: "Write",
    Operation.CREATE: "Create",
    Operation.DESCRIBE: "Describe",
    Operation.DESCRIBE_CONFIGS: "DescribeConfigs",
    Operation.IDEMPOTENT_WRITE: "IdempotentWrite",
}
"""`kafka-acls.sh --operation` and Strimzi's `operations` spell them alike."""
_KAFKA_ACLS_RESOURCE = {
    ResourceType.TOPIC: "--topic",
    ResourceType.GROUP: "--group",
    ResourceType.TRANSACTIONAL_ID: "--transactional-id",
}


def kafka_acls(acls: Sequence[AclBinding], bootstrap: str) -> list[str]:
    """One `kafka-acls.sh --add` command line per resource (all its operations)."""
    lines = []
    for b, operations in grouped(acls):
        argv = ["kafka-acls.sh", "--bootstrap-server", bootstrap, "--add"]
        argv += ["--allow-principal", b.principal]
        if b.host != "*":
            argv += ["--allow-host", b.host]
        for op in operations:
            argv += ["--operation", _KAFKA_ACLS_OPERATION[op]]
        if b.resource_type is ResourceType.CLUSTER:
            argv.append("--cluster")
        else:
            argv += [_KAFKA_ACLS_RESOURCE[b.resource_type], b.name]
        if b.pattern_type is PatternType.PREFIXED:
            argv += ["--resource-pattern-type", "prefixed"]
        lines.append(shlex.join(argv))
    return lines


_STRIMZI_RESOURCE = {
    ResourceType.TOPIC: "topic",
    ResourceType.GROUP: "group",
    ResourceType.TRANSACTIONAL_ID: "transactionalId",
    ResourceType.CLUSTER: "cluster",
}
_STRIMZI_PATTERN = {PatternType.LITERAL: "literal", PatternType.PREFIXED: "prefix"}
KUBERNETES_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
"""A KafkaUser's name is a Kubernetes object name (RFC 1123 subdomain)."""


def kafka_user(acls: Sequence[AclBinding], principal: str, cluster: str) -> dict[str, Any]:
    """A Strimzi `KafkaUser` (SCRAM-SHA-512, simple authorization) granting `acls`; the
    user's name is the principal's (Strimzi authenticates it as `User:<name>`).
    ValueError for a principal Strimzi cannot name so."""
    kind, _, user = principal.partition(":")
    if kind != "User" or not KUBERNETES_NAME.fullmatch(user):
        raise ValueError(
            f"--principal {principal!r}: a KafkaUser is User:NAME, NAME lower-case letters,"
            " digits, - and ."
        )
    rules = []
    for b, operations in grouped(acls):
        resource: dict[str, Any] = {"type": _STRIMZI_RESOURCE[b.resource_type]}
        if b.resource_type is not ResourceType.CLUSTER:
            resource |= {"name": b.name, "patternType": _STRIMZI_PATTERN[b.pattern_type]}
        rules.append(
            {
                "resource": resource,
                "operations": [_KAFKA_ACLS_OPERATION[op] for op in operations],
                "host": b.host,
            }
        )
    return {
        "apiVersion": "kafka.strimzi.io/v1beta2",
        "kind": "KafkaUser",
        "metadata": {"name": user, "labels": {"strimzi.io/cluster": cluster}},
        "spec": {
            "authentication": {"type": "scram-sha-512"},
            "authorization": {"type": "simple", "acls": rules},
        },
    }


PLAIN_KEY = re.compile(r"[a-zA-Z][a-zA-Z0-9_./-]*[a-zA-Z0-9]")
"""A key written unquoted: a letter first, none of YAML's indicators (unless a word YAML
1.1 reads as a boolean or null: `_RESERVED`)."""
_RESERVED = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})


def yaml_text(value: Any, indent: int = 0) -> str:
    """`value` (dicts, lists, strings, numbers, booleans) as block-style YAML.

    PyYAML is a test dependency only, and this shape needs no more than this: every
    string is written as a JSON string, which is a YAML double-quoted scalar, so nothing
    is re-typed on the way back (`*`, `on`, `no`, `1.0` stay strings) and nothing needs
    escaping rules of our own. tests/unit/test_acls.py reads it back with yaml.safe_load."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return "{}\n"
        out = []
        for key, item in value.items():
            plain = PLAIN_KEY.fullmatch(str(key)) and str(key).lower() not in _RESERVED
            name = key if plain else json.dumps(str(key))
            if isinstance(item, dict | list) and item:
                out.append(f"{pad}{name}:\n{yaml_text(item, indent + 2)}")
            else:
                out.append(f"{pad}{name}: {yaml_text(item).strip()}\n")
        return "".join(out)
    if isinstance(value, list):
        if not value:
            return "[]\n"
        out = []
        for item in value:
            if isinstance(item, dict | list) and item:
                out.append(f"{pad}- {yaml_text(item, indent + 2)[indent + 2 :]}")
            else:
                out.append(f"{pad}- {yaml_text(item)}")
        return "".join(out)
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value] + "\n"
    if isinstance(value, int | float):
        return f"{value!r}\n"
    return json.dumps(str(value), ensure_ascii=False) + "\n"


# -------------------------------------------------------------------- apply --


class AclsRefused(GroundstreamError, RuntimeError):
    """The broker answered, and refused at least one binding (no authorizer, or the
    principal applying them may not alter the cluster's ACLs)."""


class CreateAcls(Request[CreateAclsRequest_v1]):
    """CreateAcls (API key 30) for many bindings in one request, at version 1 only: the
    first with a pattern type (PREFIXED needs it; Kafka 2.0+), and Kafka 4.0's oldest.
    aiokafka's own `CreateAclsRequest` carries one binding and has no admin call."""

    API_KEY = CreateAclsRequest_v1.API_KEY

    def __init__(self, acls: Sequence[AclBinding]) -> None:
        self.acls = tuple(acls)

    def build(self, request_struct_class: type[CreateAclsRequest_v1]) -> CreateAclsRequest_v1:
        return request_struct_class(
            [
                (
                    int(b.resource_type),
                    b.name,
                    int(b.pattern_type),
                    b.principal,
                    b.host,
                    int(b.operation),
                    int(b.permission),
                )
                for b in self.acls
            ]
        )


def describe(b: AclBinding) -> str:
    pattern = " (prefixed)" if b.pattern_type is PatternType.PREFIXED else ""
    return f"{b.operation.name} on {b.resource_type.name} {b.name}{pattern} for {b.principal}"


def check_created(acls: Sequence[AclBinding], response: Any) -> None:
    """AclsRefused, in one line naming the first refusal, unless every binding of the
    request was created (the response has one result per binding, in order)."""
    results = list(response.creation_responses)
    if len(results) != len(acls):
        raise AclsRefused(f"the broker answered {len(results)} results for {len(acls)} ACLs")
    refused = [(b, code, text) for b, (code, text) in zip(acls, results, strict=True) if code]
    if refused:
        b, code, text = refused[0]
        error = for_code(code)
        why = f"{error.__name__}" + (f" ({text})" if text else "")
        raise AclsRefused(
            f"the broker refused {len(refused)} of {len(acls)} ACLs, first {describe(b)}: {why}"
        )


def admin_client(settings: Settings) -> AIOKafkaAdminClient:
    """The admin client `apply` uses, connected as the settings say (TLS, SASL)."""
    return clients.admin(settings.kafka(), client_id="groundstream-acls")


async def apply(settings: Settings, acls: Sequence[AclBinding]) -> int:
    """Create `acls` on the cluster (one CreateAcls request to any broker; creating a
    binding that exists is no error); the number created. AclsRefused on a refusal,
    aiokafka's KafkaError when the broker cannot be reached."""
    if not acls:
        return 0
    admin = admin_client(settings)
    await admin.start()
    try:
        response = await admin._send_request(CreateAcls(acls))
    finally:
        await admin.close()
    check_created(acls, response)
    return len(acls)
