"""Which input offsets a stage that concludes candidates as their calls return may commit.

A judge or sampler worker keeps many calls open and concludes each candidate when its own
call returns, so within a partition candidates finish out of order. Kafka keeps one
committed offset per partition: only the contiguous concluded prefix can be committed. The
candidates concluded beyond it have had their outputs committed already (in the same
transaction), so the commit also names them in its metadata — the pattern of Confluent's
Parallel Consumer — and a worker that restarts from the offset skips them instead of
deciding them twice. Offsets are not contiguous on a transactional topic (commit markers
take offsets), so the prefix follows the records fetched, not offset arithmetic.

Metadata: ``gs1:`` then comma-separated ranges ``gap+length`` of concluded offsets, each
``gap`` counted from the end of the range before (the first from the committed offset).
A range covers a run of fetched records all concluded, so there are at most as many
ranges as calls in flight + 1: the metadata stays far under the broker's
`offset.metadata.max.bytes` (4,096) for the in-flight limits the settings allow.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from aiokafka import TopicPartition

PREFIX = "gs1:"


def encode(base: int, ranges: list[tuple[int, int]]) -> str:
    """Metadata naming the concluded `ranges` (first, last; ascending) above `base`."""
    if not ranges:
        return ""
    parts, at = [], base
    for first, last in ranges:
        parts.append(f"{first - at}+{last - first}")
        at = last
    return PREFIX + ",".join(parts)


def decode(base: int, metadata: str | None) -> list[tuple[int, int]]:
    """The ranges `encode` wrote; none for any other metadata (another tool's commit)."""
    if not metadata or not metadata.startswith(PREFIX):
        return []
    ranges, at = [], base
    try:
        for part in metadata[len(PREFIX) :].split(","):
            gap, length = (int(n) for n in part.split("+"))
            if gap < 0 or length < 0:
                return []
            first = at + gap
            ranges.append((first, first + length))
            at = first + length
    except ValueError:
        return []
    return ranges


@dataclass
class _Track:
    pending: deque[int] = field(default_factory=deque)
    """Offsets fetched and not yet below the committed offset, in fetch order."""
    done: set[int] = field(default_factory=set)
    """Those of `pending` concluded (outputs sent, or committed before a restart)."""
    skip: list[tuple[int, int]] = field(default_factory=list)
    """Ranges concluded by an earlier session, from the committed offset's metadata."""
    next: int | None = None
    """The offset to commit: the first pending, or one past the last fetched."""
    changed: bool = False


class Window:
    """Per source partition: what is fetched, what is concluded, what to commit."""

    def __init__(self) -> None:
        self._tracks: dict[TopicPartition, _Track] = {}

    def restore(self, tp: TopicPartition, committed: int | None, metadata: str | None) -> None:
        """The partition's committed offset and metadata, read when the worker takes it."""
        track = self._tracks.setdefault(tp, _Track())
        track.skip = [] if committed is None else decode(committed, metadata)

    def fetched(self, tp: TopicPartition, offset: int) -> bool:
        """Note a fetched record; False when an earlier session concluded it already."""
        track = self._tracks.setdefault(tp, _Track())
        track.pending.append(offset)
        if any(first <= offset <= last for first, last in track.skip):
            track.done.add(offset)
            track.changed = True
            return False
        return True

    def concluded(self, tp: TopicPartition, offset: int) -> None:
        track = self._tracks[tp]
        track.done.add(offset)
        track.changed = True

    def commits(self) -> dict[TopicPartition, tuple[int, str]]:
        """(offset, metadata) for each partition that concluded anything since the last
        call: the contiguous concluded prefix is dropped, the rest named in the metadata."""
        out: dict[TopicPartition, tuple[int, str]] = {}
        for tp, track in self._tracks.items():
            if not track.changed:
                continue
            track.changed = False
            while track.pending and track.pending[0] in track.done:
                offset = track.pending.popleft()
                track.done.discard(offset)
                track.next = offset + 1
            if track.pending:
                track.next = track.pending[0]
            if track.next is None:
                continue
            out[tp] = (track.next, encode(track.next, self._ranges(track)))
        return out

    @staticmethod
    def _ranges(track: _Track) -> list[tuple[int, int]]:
        ranges: list[tuple[int, int]] = []
        run: list[int] = []
        for offset in track.pending:
            if offset in track.done:
                run.append(offset)
            elif run:
                ranges.append((run[0], run[-1]))
                run = []
        if run:
            ranges.append((run[0], run[-1]))
        return ranges
