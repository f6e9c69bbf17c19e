"""Which errors may be retried, and what an operator chose for those that may not.

An error a stage raises is either **retryable** (not the message's fault: the broker, the
connection, memory; the batch is redone, uncommitted, and no candidate is lost) or
**permanent** (this candidate's fault, or a bug it triggers: retrying gives the same
error). Groundstream's own errors say which on the error tree
(`GroundstreamError.retryable`); errors of other libraries are classified here, in one
table, by the qualified names of their classes: matched along the class's MRO (so
aiokafka's `KafkaConnectionError` counts as its `KafkaError`) without importing aiokafka,
torch or onnxruntime into the core. Anything not listed is permanent.

A permanent error of one candidate is handled as the operator chose
(GROUNDSTREAM_ON_PROCESSING_ERROR, or a callback passed to the runtime): dead-letter the
candidate and go on (the default), or stop the worker with the batch uncommitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from pipeline.errors import GroundstreamError

RETRYABLE: Mapping[str, str] = MappingProxyType(
    {
        "builtins.MemoryError": "the process ran out of memory; the message is not at fault",
        "builtins.ConnectionError": "a connection refused, reset or aborted (and subclasses)",
        "aiokafka.errors.KafkaError": "the broker side: every aiokafka error",
        "torch.OutOfMemoryError": "GPU memory (torch >= 2.5; torch.cuda.OutOfMemoryError is it)",
        "torch.cuda.OutOfMemoryError": "GPU memory, torch before 2.5",
    }
)
"""Other libraries' retryable errors, by `module.qualname` of the class or a base class."""

RETRYABLE_MESSAGES: Mapping[str, str] = MappingProxyType(
    {
        # ONNX Runtime has no out-of-memory class: its arena's failure is a RuntimeException
        # (status 6) whose message names the allocation (microsoft/onnxruntime#16307).
        "onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException": (
            "Failed to allocate memory"
        ),
    }
)
"""Classes that are retryable only when their message holds the given text."""


def _names(exc: BaseException) -> list[str]:
    return [f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__]


def is_retryable(exc: BaseException) -> bool:
    """True when `exc` is not the message's fault: redo the batch, never dead-letter it."""
    if isinstance(exc, GroundstreamError):
        return exc.retryable
    for name in _names(exc):
        if name in RETRYABLE:
            return True
        if name in RETRYABLE_MESSAGES and RETRYABLE_MESSAGES[name] in str(exc):
            return True
    return False


class ErrorAction(StrEnum):
    """What happens to a candidate whose stage raised a permanent error."""

    DEADLETTER = "deadletter"
    """Park it on `deadletter` with the error's type as the reason; the batch goes on."""
    STOP = "stop"
    """Stop the worker, committing nothing of the batch: it is redone on the next start."""
