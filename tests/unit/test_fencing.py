"""The generation-fenced TxnOffsetCommit's wire format (v3, flexible) and its refusal to
fall back to v0 silently on a broker without it. The broker's answers are tested on the
real broker: tests/integration/test_txn_fencing.py."""

from __future__ import annotations

from io import BytesIO

import pytest
from aiokafka.errors import IncompatibleBrokerVersion

from topics.fencing import GroupMetadata, TxnOffsetCommitRequest, TxnOffsetCommitResponse_v3

GROUP = GroupMetadata("grp", 5, "m-1", "inst")


def request(group: GroupMetadata = GROUP) -> TxnOffsetCommitRequest:
    return TxnOffsetCommitRequest("tx", 7, 1, group, [("t", [(0, 10, "")])])


def test_v3_carries_the_generation_member_and_instance_in_compact_fields() -> None:
    wire = request().prepare({28: (0, 5)}).encode().hex()
    assert wire == (
        "037478" "04677270"  # transactional id, group id: compact strings (length + 1)
        "0000000000000007" "0001"  # producer id, epoch
        "00000005" "046d2d31" "05696e7374"  # generation, member id, instance id
        "02" "0274" "02" "00000000" "000000000000000a" "ffffffff" "01" "00"  # one partition
        "00" "00"  # tagged fields of the topic and of the request
    )  # fmt: skip


def test_no_instance_id_is_a_null_compact_string() -> None:
    wire = request(GroupMetadata("grp", 5, "m-1")).prepare({28: (0, 5)}).encode()
    assert wire.hex().startswith("037478046772700000000000000007000100000005046d2d3100")


def test_a_broker_without_v3_is_named_not_sent_v0() -> None:
    with pytest.raises(IncompatibleBrokerVersion, match=r"Kafka 2\.5 or later"):
        request().prepare({28: (0, 2)})


def test_the_response_reads_each_partition_s_error() -> None:
    body = TxnOffsetCommitResponse_v3(0, [("t", [(0, 22, {}), (1, 0, {})], {})], {}).encode()
    decoded = TxnOffsetCommitResponse_v3.decode(BytesIO(body))
    assert decoded.topics == [("t", [(0, 22, {}), (1, 0, {})], {})]
