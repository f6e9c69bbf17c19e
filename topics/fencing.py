"""Generation-fenced transactional offset commits (KIP-447) for aiokafka's producer.

aiokafka 0.14 sends TxnOffsetCommit v0: the transaction's offsets name the group and the
producer, not the group member. A replica cut off from its group (paused, partitioned
away) past its session timeout has lost its partitions to another replica; when it
wakes, v0 lets it commit the stale batch it held, and that batch's outputs count twice.
v3 (Kafka 2.5+) carries the group's generation id, member id and group instance id, and
the group coordinator refuses offsets from a member that is no longer part of the
current generation: ILLEGAL_GENERATION (the group rebalanced since), UNKNOWN_MEMBER_ID
(the member was dropped), FENCED_INSTANCE_ID (another member joined under its static
instance id). The refusal makes the transaction abortable, as the Java client does
(`CommitFailedException` / `FencedInstanceIdException`), so none of its writes is ever
seen at read_committed. This is Kafka Streams' own fence since 2.6.

What this module adds to aiokafka, as it could be offered upstream:

* `TxnOffsetCommitRequest_v3` / `TxnOffsetCommitResponse_v3`: the flexible version
  (compact strings and arrays, tagged fields), declared as aiokafka declares its other
  flexible requests (`aiokafka.protocol.admin`).
* `GroupMetadata`: what Java's `consumer.groupMetadata()` gives, read from an aiokafka
  consumer's coordinator (`GroupMetadata.of`).
* `GroupFencedProducer`: an `AIOKafkaProducer` whose `send_offsets_to_transaction`
  also takes a `GroupMetadata` in place of the group id, and then commits with v3; with
  a plain group id it is aiokafka's own (v0). The refusal raises `GroupFenced` from
  `send_offsets_to_transaction`; `abort_transaction` then aborts on the broker.

* `stable_offsets(consumer)`: OffsetFetch v7 with require_stable, so a member that takes
  over partitions waits while a cut-off member's transaction holds their offsets pending
  (added, not yet committed or aborted), instead of starting from the older ones.

`topics.clients.producer` makes every producer a `GroupFencedProducer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MethodType
from typing import Any

import aiokafka.errors as Errors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import CoordinationType
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    IllegalGenerationError,
    IncompatibleBrokerVersion,
    KafkaError,
    UnknownMemberIdError,
)
from aiokafka.producer.sender import Sender, TxnOffsetCommitHandler
from aiokafka.producer.transaction_manager import TransactionManager, TransactionState
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)
from aiokafka.structs import OffsetAndMetadata

from pipeline.errors import GroundstreamError

TXN_OFFSET_COMMIT = 28
"""The API key of TxnOffsetCommit."""
OFFSET_FETCH = 9
UNKNOWN_OFFSET = -1
FENCED_INSTANCE_ID = 82
"""Not among aiokafka 0.14's error classes."""
REFUSALS = {
    IllegalGenerationError.errno: "ILLEGAL_GENERATION",
    UnknownMemberIdError.errno: "UNKNOWN_MEMBER_ID",
    FENCED_INSTANCE_ID: "FENCED_INSTANCE_ID",
}
"""The coordinator's answers to offsets from a member not in the group's generation."""
NO_LEADER_EPOCH = -1


class TxnOffsetCommitResponse_v3(Response):
    API_KEY = TXN_OFFSET_COMMIT
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class TxnOffsetCommitRequest_v3(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = TXN_OFFSET_COMMIT
    API_VERSION = 3
    RESPONSE_TYPE = TxnOffsetCommitResponse_v3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("group_id", CompactString("utf-8")),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("generation_id", Int32),
        ("member_id", CompactString("utf-8")),
        ("group_instance_id", CompactString("utf-8")),  # nullable: None encodes as 0
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("committed_metadata", CompactString("utf-8")),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


@dataclass(frozen=True)
class GroupMetadata:
    """A consumer's place in its group, as KIP-447 sends it with the offsets."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None

    @classmethod
    def of(cls, consumer: AIOKafkaConsumer) -> GroupMetadata:
        """`consumer`'s group, generation and member id now (aiokafka has no public
        accessor: its coordinator holds them, updated on every join)."""
        coordinator = consumer._coordinator
        if coordinator is None or not getattr(coordinator, "group_id", None):
            raise ValueError("the consumer is in no group (group_id=None)")
        return cls(
            coordinator.group_id,
            coordinator.generation,
            coordinator.member_id,
            coordinator._group_instance_id,
        )


class GroupFenced(GroundstreamError, KafkaError):
    """The group coordinator refused the transaction's offsets: the member that fetched
    them is no longer in the group's generation, and its partitions belong to another.
    The transaction can only be aborted."""

    retriable = False

    def __init__(self, group: GroupMetadata, error: str) -> None:
        super().__init__(
            f"{error}: group {group.group_id} refused offsets of generation"
            f" {group.generation_id} (member {group.member_id or '-'},"
            f" instance {group.group_instance_id or '-'})"
        )
        self.group, self.error = group, error

    @property
    def instance_fenced(self) -> bool:
        """Another member joined under this member's static instance id: a successor of
        the same identity runs, and this one should stop rather than rejoin."""
        return self.error == "FENCED_INSTANCE_ID"


class TxnOffsetCommitRequest(Request[TxnOffsetCommitRequest_v3]):
    """TxnOffsetCommit with the group member's metadata: v3, or an error naming the
    broker as too old (Kafka before 2.5 has no generation-fenced commit)."""

    API_KEY = TXN_OFFSET_COMMIT

    def __init__(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group: GroupMetadata,
        topics: list[tuple[str, list[tuple[int, int, str]]]],
    ) -> None:
        self._transactional_id = transactional_id
        self._producer_id, self._producer_epoch = producer_id, producer_epoch
        self._group = group
        self._topics = topics

    def prepare(self, versions: dict[int, tuple[int, int]]) -> TxnOffsetCommitRequest_v3:
        low, high = versions.get(self.API_KEY, (0, -1))
        if not low <= TxnOffsetCommitRequest_v3.API_VERSION <= high:
            raise IncompatibleBrokerVersion(
                f"the broker has no TxnOffsetCommit v3 (its versions {low}-{high}):"
                " generation-fenced offset commits need Kafka 2.5 or later"
            )
        return self.build(TxnOffsetCommitRequest_v3)

    def build(self, request_struct_class: type[TxnOffsetCommitRequest_v3]) -> Any:
        group = self._group
        return request_struct_class(
            self._transactional_id,
            group.group_id,
            self._producer_id,
            self._producer_epoch,
            group.generation_id,
            group.member_id,
            group.group_instance_id,
            [
                (topic, [(p, offset, NO_LEADER_EPOCH, meta, {}) for p, offset, meta in parts], {})
                for topic, parts in self._topics
            ],
            {},
        )


@dataclass(frozen=True)
class _Errors:
    """A v3 response in v0's shape, for aiokafka's own handling of the other errors."""

    errors: list[tuple[str, list[tuple[int, int]]]]


def refuse(txn_manager: TransactionManager, exc: KafkaError) -> None:
    """Make the transaction abortable with `exc`, failing the offsets' waiter. Unlike
    aiokafka's `error_transaction`, the partitions written stay known, so the abort that
    follows sends EndTxn(ABORT) at once instead of leaving the transaction open on the
    broker (holding back every read_committed consumer) until the producer's next start
    or its timeout."""
    txn_manager._transition_to(TransactionState.ABORTABLE_ERROR)
    for _, _, fut in txn_manager._pending_txn_offsets:
        if not fut.done():
            fut.set_exception(exc)
    txn_manager._pending_txn_offsets.clear()
    waiter = txn_manager._transaction_waiter
    if not waiter.done():
        waiter.set_exception(exc)
        waiter.exception()  # seen: `commit_transaction` raises it, `abort_transaction` replaces it


class _FencedTxnOffsetCommitHandler(TxnOffsetCommitHandler):
    def __init__(self, sender: Sender, offsets: dict[Any, Any], group: GroupMetadata) -> None:
        super().__init__(sender, offsets, group.group_id)
        self._group = group

    def create_request(self) -> TxnOffsetCommitRequest:
        txn_manager = self._sender._txn_manager
        topics: dict[str, list[tuple[int, int, str]]] = {}
        for tp, offset in sorted(self._offsets.items()):
            topics.setdefault(tp.topic, []).append((tp.partition, offset.offset, offset.metadata))
        return TxnOffsetCommitRequest(
            txn_manager.transactional_id,
            txn_manager.producer_id,
            txn_manager.producer_epoch,
            self._group,
            list(topics.items()),
        )

    def handle_response(self, resp: Any) -> float | None:
        for _, partitions, _ in resp.topics:
            for _, error_code, _ in partitions:
                if error_code in REFUSALS:
                    refuse(
                        self._sender._txn_manager, GroupFenced(self._group, REFUSALS[error_code])
                    )
                    return None
        shaped = _Errors(
            [(topic, [(p, code) for p, code, _ in parts]) for topic, parts, _ in resp.topics]
        )
        return super().handle_response(shaped)


class _GroupFencedSender(Sender):
    """aiokafka's sender, committing a transaction's offsets with v3 when they came with
    the group member's metadata."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.groups: dict[str, GroupMetadata] = {}

    async def _do_txn_offset_commit(self, offsets: Any, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return await super()._do_txn_offset_commit(offsets, group_id)
        if not offsets:
            return None
        try:  # sent to the group's coordinator, not the transaction's (as aiokafka does)
            node_id = await self._find_coordinator(CoordinationType.GROUP, group_id)
        except GroupAuthorizationFailedError as exc:
            self._txn_manager.error_transaction(exc)
            return None
        await _FencedTxnOffsetCommitHandler(self, offsets, group).do(node_id)
        return None


class GroupFencedProducer(AIOKafkaProducer):
    """aiokafka's producer whose transactional offset commit can be fenced by the group's
    generation (KIP-447): pass `send_offsets_to_transaction` a `GroupMetadata`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        plain = self._sender
        self._sender = _GroupFencedSender(
            self.client,
            acks=plain._acks,
            txn_manager=self._txn_manager,
            message_accumulator=self._message_accumulator,
            retry_backoff_ms=plain._retry_backoff * 1000,
            request_timeout_ms=plain._request_timeout_ms,
        )

    async def send_offsets_to_transaction(
        self, offsets: dict[Any, Any], group_id: str | GroupMetadata
    ) -> None:
        """Add `offsets` to the open transaction, for the group `group_id` names. With a
        `GroupMetadata` (`GroupMetadata.of(consumer)`), the coordinator refuses them if that
        member has left the group's generation: `GroupFenced`, and the transaction must be
        aborted."""
        sender: _GroupFencedSender = self._sender  # type: ignore[assignment]
        if isinstance(group_id, GroupMetadata):
            sender.groups[group_id.group_id] = group_id
            group_id = group_id.group_id
        else:
            sender.groups.pop(group_id, None)
        await super().send_offsets_to_transaction(offsets, group_id)


UNSTABLE_OFFSET_COMMIT = 88
"""OffsetFetch's answer, with require_stable, while a transaction holds offsets pending."""


class OffsetFetchResponse_v7(Response):
    API_KEY = OFFSET_FETCH
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("metadata", CompactString("utf-8")),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class OffsetFetchRequest_v7(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = OFFSET_FETCH
    API_VERSION = 7
    RESPONSE_TYPE = OffsetFetchResponse_v7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


class StableOffsetFetchRequest(Request[OffsetFetchRequest_v7]):
    """OffsetFetch v7 with require_stable (KIP-447's other half): while a transaction
    holds offsets of the group pending, the broker answers UNSTABLE_OFFSET_COMMIT instead
    of the last committed offset, and the consumer asks again."""

    API_KEY = OFFSET_FETCH

    def __init__(self, group_id: str, topics: list[tuple[str, list[int]]]) -> None:
        self._group_id, self._topics = group_id, topics

    def prepare(self, versions: dict[int, tuple[int, int]]) -> OffsetFetchRequest_v7:
        low, high = versions.get(self.API_KEY, (0, -1))
        if not low <= OffsetFetchRequest_v7.API_VERSION <= high:
            raise IncompatibleBrokerVersion(
                f"the broker has no OffsetFetch v7 (its versions {low}-{high}):"
                " stable offset fetches need Kafka 2.5 or later"
            )
        return self.build(OffsetFetchRequest_v7)

    def build(self, request_struct_class: type[OffsetFetchRequest_v7]) -> Any:
        topics = [(name, partitions, {}) for name, partitions in self._topics]
        return request_struct_class(self._group_id, topics, True, {})


class UnstableOffsetCommit(GroundstreamError, KafkaError):
    """A transaction holds offsets of these partitions pending: ask again."""

    retriable = True
    retryable = True


async def _fetch_stable_offsets(coordinator: Any, partitions: list[TopicPartition]) -> dict:
    """aiokafka's `GroupCoordinator._do_fetch_commit_offsets`, by OffsetFetch v7 with
    require_stable: an UNSTABLE_OFFSET_COMMIT is retried (`fetch_committed_offsets` waits
    its backoff and asks again) until the pending transaction commits or aborts."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    response = await coordinator._send_req(
        StableOffsetFetchRequest(coordinator.group_id, list(by_topic.items()))
    )
    codes = [response.error_code] + [
        code for _, parts, _ in response.topics for _, _, _, _, code, _ in parts
    ]
    for code in codes:
        error_type = Errors.for_code(code)
        if code == UNSTABLE_OFFSET_COMMIT:
            raise UnstableOffsetCommit("a transaction holds offsets of the group pending")
        if error_type in (Errors.GroupLoadInProgressError, Errors.CoordinatorLoadInProgressError):
            raise error_type()
        if error_type in (Errors.NotCoordinatorForGroupError, Errors.NotCoordinatorError):
            coordinator.coordinator_dead()
            raise error_type()
        if error_type is Errors.GroupAuthorizationFailedError:
            raise error_type(coordinator.group_id)
        if error_type not in (Errors.NoError, Errors.UnknownTopicOrPartitionError):
            raise KafkaError(f"fetching the committed offsets: {error_type.__name__}")
    offsets = {}
    for topic, parts, _ in response.topics:
        for partition, offset, _, metadata, code, _ in parts:
            if code == 0 and offset != UNKNOWN_OFFSET:
                offsets[TopicPartition(topic, partition)] = OffsetAndMetadata(
                    offset, metadata or ""
                )
    return offsets


def stable_offsets(consumer: AIOKafkaConsumer) -> None:
    """Make the started `consumer` read its group's committed offsets only when no
    transaction holds newer ones pending (call before it subscribes). Without this, a
    member that takes over partitions while a cut-off member's transaction has added its
    offsets but not yet ended starts from the older offsets, and both commit the batch."""
    coordinator = consumer._coordinator
    if coordinator is None:
        raise ValueError("start the consumer, with a group_id, first")
    coordinator._do_fetch_commit_offsets = MethodType(_fetch_stable_offsets, coordinator)
