"""Issue 35: the offsets a stage concluding candidates as their calls return may commit
(`workers.runtime.inflight`): the contiguous concluded prefix, with what is concluded
beyond it named in the metadata, so a restart skips it instead of deciding it twice."""

from __future__ import annotations

from aiokafka import TopicPartition

from workers.runtime.inflight import Window, decode, encode
from workers.runtime.settings import MAX_IN_FLIGHT

TP = TopicPartition("judge", 0)


def test_out_of_order_conclusions_commit_the_prefix_and_name_the_rest() -> None:
    w = Window()
    w.restore(TP, None, None)
    for offset in (10, 11, 13, 14, 15):  # 12: a transaction marker, never fetched
        assert w.fetched(TP, offset)
    w.concluded(TP, 11)
    w.concluded(TP, 14)
    w.concluded(TP, 15)
    offset, metadata = w.commits()[TP]
    assert offset == 10  # 10 still open: nothing of the partition is below the commit
    assert decode(offset, metadata) == [(11, 11), (14, 15)]
    w.concluded(TP, 10)
    offset, metadata = w.commits()[TP]
    assert offset == 13 and decode(offset, metadata) == [(14, 15)]
    w.concluded(TP, 13)
    assert w.commits()[TP] == (16, "")  # one past the last fetched, markers or not
    assert w.commits() == {}  # nothing concluded since: nothing to commit


def test_a_restart_skips_exactly_what_the_metadata_names() -> None:
    first = Window()
    first.restore(TP, None, None)
    for offset in range(20, 30):
        first.fetched(TP, offset)
    done = {21, 22, 25, 29}
    for offset in done:
        first.concluded(TP, offset)
    committed, metadata = first.commits()[TP]
    # The worker dies; its successor resumes at the committed offset with its metadata.
    second = Window()
    second.restore(TP, committed, metadata)
    redo = [o for o in range(committed, 30) if second.fetched(TP, o)]
    assert committed == 20
    assert redo == [o for o in range(20, 30) if o not in done]
    for offset in redo:
        second.concluded(TP, offset)
    assert second.commits()[TP] == (30, "")


def test_metadata_of_the_worst_case_fits_the_brokers_limit() -> None:
    """Every other record open (the most ranges the in-flight limit allows), the offsets
    far apart: the metadata stays under offset.metadata.max.bytes (4,096)."""
    w = Window()
    base = 10**12
    w.restore(TP, None, None)
    offsets = [base + 1000 * i for i in range(2 * MAX_IN_FLIGHT + 1)]
    for offset in offsets:
        w.fetched(TP, offset)
    for offset in offsets[1::2]:
        w.concluded(TP, offset)
    offset, metadata = w.commits()[TP]
    assert offset == base
    assert len(decode(offset, metadata)) == MAX_IN_FLIGHT
    assert len(metadata.encode()) < 4096


def test_foreign_or_broken_metadata_skips_nothing() -> None:
    for metadata in ("", "some tool's note", "gs1:x+1", "gs1:-3+1", "gs1:1"):
        w = Window()
        w.restore(TP, 5, metadata)
        assert all(w.fetched(TP, o) for o in range(5, 12))
    assert encode(5, []) == ""
    assert decode(5, encode(5, [(6, 8), (10, 10)])) == [(6, 8), (10, 10)]
