"""Which errors may be retried (issue 24, item 5): the error tree's own mark, and one
table for other libraries' errors, tried on their real classes. A retryable error redoes
the batch; a permanent one dead-letters the candidate (or stops, if chosen)."""

from __future__ import annotations

import pytest
import torch
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NotLeaderForPartitionError
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, RuntimeException

from pipeline.errors import GroundstreamError, PolicyError, ScoringError
from pipeline.failures import RETRYABLE, RETRYABLE_MESSAGES, is_retryable
from topics.schema import MalformedMessage
from workers.clients.agent import OutcomeTimeout
from workers.runtime.isolation import ProcessingStopped
from workers.runtime.loop import BrokerUnavailable, ControlUnknown, StaleBatch
from workers.runtime.runner import TopicsMissing

ORT_OOM = (
    "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running"
    " MatMul node. Status Message: bfc_arena.cc:376 onnxruntime::BFCArena::AllocateRawInternal"
    " Failed to allocate memory for requested buffer of size 939524096"
)


class SomeOutOfMemoryError(Exception):
    """Named like torch's, but not torch's: no longer retried by its name's ending."""


RETRYABLE_ERRORS = [
    KafkaConnectionError(),
    KafkaTimeoutError(),
    NotLeaderForPartitionError(),
    MemoryError(),
    ConnectionResetError(),
    ConnectionRefusedError(),
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeException(ORT_OOM),
    StaleBatch("reassigned"),
    ControlUnknown("unknown"),
    BrokerUnavailable("gone"),
    TopicsMissing("missing"),
    OutcomeTimeout("c-1", 5.0),
]

PERMANENT_ERRORS = [
    ValueError("bad"),
    KeyError("k"),
    TimeoutError(),
    RuntimeError("CUDA error: device-side assert triggered"),
    RuntimeException("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : shape mismatch"),
    Fail("[ONNXRuntimeError] : 1 : FAIL : Load model failed"),
    SomeOutOfMemoryError(),
    MalformedMessage("no question"),
    ScoringError("empty text"),
    PolicyError("x", 1, "y"),
    ProcessingStopped("stopped"),
    GroundstreamError("root"),
]


@pytest.mark.parametrize("error", RETRYABLE_ERRORS, ids=lambda e: type(e).__name__)
def test_retryable_errors_are_retried(error: BaseException) -> None:
    assert is_retryable(error)


@pytest.mark.parametrize(
    "error", PERMANENT_ERRORS, ids=lambda e: f"{type(e).__name__}:{str(e)[:20]}"
)
def test_permanent_errors_are_not(error: BaseException) -> None:
    assert not is_retryable(error)


def test_the_table_names_the_classes_as_they_are_today() -> None:
    """A row whose class moved or was renamed would silently stop matching."""
    named = {f"{c.__module__}.{c.__qualname__}" for c in (MemoryError, ConnectionError)}
    named |= {
        f"{c.__module__}.{c.__qualname__}"
        for c in (KafkaConnectionError.__mro__[1], torch.OutOfMemoryError, RuntimeException)
    }
    assert named <= set(RETRYABLE) | set(RETRYABLE_MESSAGES)
    assert torch.cuda.OutOfMemoryError is torch.OutOfMemoryError


def test_the_tree_decides_for_its_own_errors() -> None:
    """A project error's mark wins over a standard base the table lists."""

    class Refused(GroundstreamError, ConnectionError):
        retryable = False

    assert not is_retryable(Refused())
    assert is_retryable(ConnectionError())
