"""Leave a stage's consumer group as a static member, so that a stopped worker's partitions
move to the others at once instead of after the session timeout.

Workers join as static members (`group_instance_id`, `StageLoop.member_id`): the broker
keeps a static member's partitions for it until its session times out, even after its
consumer closes, so that a restart under the same id takes them back without a rebalance.
aiokafka never sends a static member's LeaveGroup (its `maybe_leave_group` skips it, and
its LeaveGroup stops at version 1, which has no instance id), so a worker that stops for
good (a scale-down) would leave its partitions idle for the session timeout. Version 3 of
LeaveGroup (KIP-345, Kafka 2.4+) names members by instance id; this is what Kafka's own
`AdminClient.removeMembersFromConsumerGroup` sends.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from pipeline.errors import GroundstreamError
from topics import clients
from topics.clients import KafkaConnection

log = logging.getLogger("groundstream.membership")

UNKNOWN_MEMBER_ID = ""
"""A LeaveGroup member named by instance id alone: the broker removes whichever member
holds that instance id (a static member's own member id is gone once its consumer closed)."""


class LeaveGroupResponse_v3(Response):
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class LeaveGroupRequest_v3(RequestStruct):
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class LeaveGroup(Request[LeaveGroupRequest_v3]):
    """LeaveGroup (API key 13) for static members, at version 3 only: the first that names
    members by instance id, and not flexible (no tagged fields to encode)."""

    API_KEY = LeaveGroupRequest_v3.API_KEY

    def __init__(self, group: str, instance_ids: list[str]) -> None:
        self.group, self.instance_ids = group, list(instance_ids)

    def build(self, request_struct_class: type[LeaveGroupRequest_v3]) -> LeaveGroupRequest_v3:
        return request_struct_class(
            self.group, [(UNKNOWN_MEMBER_ID, instance) for instance in self.instance_ids]
        )


class LeaveRefused(GroundstreamError, KafkaError):
    """The coordinator answered the LeaveGroup with an error (for the group or the member)."""


def check_left(response: Any) -> None:
    """LeaveRefused naming the error, unless the group and every member left cleanly."""
    codes = [response.error_code, *(code for _, _, code in response.members)]
    for code in codes:
        if code:
            raise LeaveRefused(f"{for_code(code).__name__} (error {code})")


async def leave_group(conn: KafkaConnection, group: str, instance_id: str) -> None:
    """Remove the static member `instance_id` from consumer group `group`, through the
    group's coordinator: its partitions are reassigned now. LeaveRefused when the broker
    refuses (UnknownMemberIdError: no member holds that id, e.g. its session had already
    timed out), aiokafka's KafkaError when the cluster cannot be reached."""
    admin = clients.admin(conn, client_id="groundstream-leave")
    await admin.start()
    try:
        node = await admin.find_coordinator(group)
        response = await admin._send_request_to_node(node, LeaveGroup(group, [instance_id]))
    finally:
        await admin.close()
    check_left(response)
