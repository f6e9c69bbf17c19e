"""The audit chain: an intact log verifies; every kind of tampering is found and named."""

from __future__ import annotations

import copy

import pytest

from pipeline.trail.audit import (
    CandidateMessage,
    DecisionMessage,
    Finding,
    Head,
    Located,
    chain_entry,
    digest,
    head_of,
    verify,
)
from pipeline.trail.records import make_record, record_hash

KEY = b"audit-key"
T0 = 1_700_000_000.0


def rec(cid: str, stage: str, t: float, **extra) -> dict:
    fields = {
        "session_id": "s1",
        "turn": 1,
        "action": "accept",
        "write_to_state": False,
        "reason": "r",
        "policy_version": "p",
        "decided_at": t,
        "mode": "evaluate",
        "route": "default",
        "prev_hash": "",
    }
    fields.update(extra)
    return make_record(candidate_id=cid, stage=stage, **fields)


def trail(cid: str, t: float) -> list[dict]:
    return [
        rec(cid, "geometry", t),
        rec(cid, "switch", t + 0.1),
        rec(cid, "outcome", t + 0.2, topic="state", write_to_state=True),
    ]


def chain(records: list[dict], key: bytes | None = None) -> list[Located]:
    head, out = Head(), []
    for offset, record in enumerate(records):
        entry = chain_entry(record, "s1", head, key, partition=0, offset=offset)
        head = head_of(entry)
        out.append(Located(entry, f"audit[0]@{offset}"))
    return out


def log(key: bytes | None = None) -> list[Located]:
    return chain(trail("a", T0) + trail("b", T0 + 1) + trail("c", T0 + 2), key)


def candidates(*ids: str) -> list[CandidateMessage]:
    return [CandidateMessage((i,), f"candidates[0]@{n}", T0) for n, i in enumerate(ids)]


def rehash(entries: list[Located], key: bytes | None, start: int) -> list[Located]:
    """What a careful forger does: renumber and relink from `start`, recomputing hashes."""
    out = [Located(copy.deepcopy(dict(e.entry)), e.where) for e in entries]
    for i in range(start, len(out)):
        entry = out[i].entry
        entry["seq"] = i + 1
        entry["prev"] = out[i - 1].entry["hash"] if i else ""
        entry["hash"] = digest(entry, key)
    return out


def kinds(report) -> set[Finding]:
    return {p.kind for p in report.problems}


def check(entries, key=None, ids=("a", "b", "c"), **kw):
    return verify(entries, candidates(*ids), key, grace=0.0, **kw)


class TestIntact:
    @pytest.mark.parametrize("key", [None, KEY])
    def test_an_intact_log_verifies(self, key):
        report = check(log(key), key)
        assert report.intact, [p.render() for p in report.problems]
        assert (report.chains, report.entries, report.candidates) == (1, 9, 3)

    def test_a_superseded_attempt_is_a_note_not_tampering(self):
        later = rec("b", "superseded", T0 + 5, reason="superseded: already ended in state")
        report = check(chain(trail("a", T0) + trail("b", T0 + 1) + [later] + trail("c", T0 + 2)))
        assert report.intact
        assert [n.kind for n in report.notes] == [Finding.SUPERSEDED]

    def test_a_person_after_review_is_a_second_outcome_allowed(self):
        parked = rec("a", "outcome", T0 + 0.2, topic="escalations.review", action="escalate")
        person = rec("a", "outcome", T0 + 9, topic="state", write_to_state=True)
        records = [rec("a", "geometry", T0), parked, rec("a", "review", T0 + 8), person]
        assert check(chain(records), ids=("a",)).intact

    def test_a_second_outcome_after_a_final_one_is_named(self):
        extra = rec("a", "outcome", T0 + 9, topic="escalations.reject", action="reject")
        report = check(chain([*trail("a", T0), extra]), ids=("a",))
        assert [(p.kind, p.what) for p in report.problems] == [(Finding.INSERTED, "a")]

    def test_review_may_be_followed_by_review_again_and_then_a_verdict(self):
        parked = rec("a", "outcome", T0 + 0.2, topic="escalations.review", action="escalate")
        again = rec("a", "outcome", T0 + 5, topic="escalations.review", action="escalate")
        person = rec("a", "outcome", T0 + 9, topic="state", write_to_state=True)
        assert check(chain([rec("a", "geometry", T0), parked, again, person]), ids=("a",)).intact

    def test_recent_trails_are_in_flight(self):
        entries = chain([*trail("a", T0), rec("b", "geometry", T0 + 1)])
        report = verify(entries, candidates("a", "b", "c"), None, grace=60.0)
        assert report.intact
        assert {n.kind for n in report.notes} == {Finding.IN_FLIGHT}


class TestTampering:
    def test_deleted_candidate(self):
        entries = [e for e in log() if e.entry["record"]["candidate_id"] != "b"]
        report = check(entries)
        assert kinds(report) == {Finding.REMOVED, Finding.CANDIDATE_WITHOUT_OUTCOME}
        removed = next(p for p in report.problems if p.kind is Finding.REMOVED)
        assert removed.what == "chain s1 #4..#6"
        assert "(a/outcome)" in removed.detail
        assert any(p.what.startswith("b ") for p in report.problems)

    def test_deleted_candidate_renumbered_without_key_still_misses_its_outcome(self):
        kept = [e for e in log() if e.entry["record"]["candidate_id"] != "b"]
        report = check(rehash(kept, None, 3))
        assert kinds(report) == {Finding.CANDIDATE_WITHOUT_OUTCOME}

    def test_cut_tail_with_the_outcome(self):
        report = check(log()[:-1])
        assert kinds(report) == {Finding.NO_OUTCOME}
        (problem,) = report.problems
        assert problem.what == "c" and "audit[0]@7" in problem.detail

    def test_cut_tail_of_whole_candidates(self):
        report = check(log()[:-3])
        assert kinds(report) == {Finding.CANDIDATE_WITHOUT_OUTCOME}
        assert report.problems[0].what.startswith("c ")

    def test_cut_tail_against_the_recorders_head(self):
        entries = log()
        heads = {"s1": head_of(entries[-1].entry)}
        report = verify(entries[:-3], [], None, grace=0.0, heads=heads)
        (problem,) = report.problems
        assert problem.kind is Finding.REMOVED and problem.what == "chain s1 #7..#9"

    def test_reorder_across_candidates(self):
        entries = log()
        entries[2], entries[3] = entries[3], entries[2]
        report = check(entries)
        assert kinds(report) == {Finding.REORDERED}
        (problem,) = report.problems
        assert problem.what.startswith("chain s1 #3 (a/outcome)")

    def test_insert(self):
        entries = log()
        forged = chain_entry(
            rec("a", "outcome", T0 + 0.3, topic="escalations.reject", action="reject"),
            "s1",
            head_of(entries[1].entry),
            None,
            partition=0,
            offset=99,
        )
        entries.insert(3, Located(forged, "audit[0]@99"))
        report = check(entries)
        assert Finding.INSERTED in kinds(report)
        assert any("audit[0]@99" in p.what for p in report.problems)

    def test_edit(self):
        entries = log()
        entries[4].entry["record"]["action"] = "reject"
        report = check(entries)
        assert kinds(report) == {Finding.ALTERED}
        assert all(p.what.startswith("chain s1 #5 (b/switch)") for p in report.problems)

    def test_edit_with_every_hash_recomputed_passes_without_a_key(self):
        entries = log()
        entries[4].entry["record"]["action"] = "reject"
        record = entries[4].entry["record"]
        record["hash"] = record_hash(record)
        assert check(rehash(entries, None, 4)).intact  # what the key is for

    def test_edit_with_every_hash_recomputed_fails_with_the_key(self):
        entries = log(KEY)
        entries[4].entry["record"]["action"] = "reject"
        forged = rehash(entries, b"the forger's guess", 4)
        report = check(forged, KEY)
        assert kinds(report) == {Finding.ALTERED}
        assert report.problems[0].what.startswith("chain s1 #5 (b/switch)")

    def test_a_keyed_log_downgraded_to_plain_hashes_fails(self):
        entries = log(KEY)
        entries[4].entry["mac"] = "sha256"
        report = check(rehash(entries, None, 4), KEY)
        assert report.problems[0].detail == "an unkeyed entry in a keyed log"

    def test_a_keyed_log_without_the_key_is_not_intact(self):
        report = check(log(KEY))
        assert kinds(report) == {Finding.UNVERIFIABLE}

    def test_a_log_read_from_the_middle_starts_where_it_starts(self):
        assert check(log()[3:], ids=("b", "c"), anchored=False).intact
        assert Finding.REMOVED in kinds(check(log()[3:], ids=("b", "c")))


def decisions(entries: list[Located], t: float = T0, **forged: int) -> list[DecisionMessage]:
    """What `decisions` holds: one message per chained record (at its source offset), plus
    forged records nobody chained, at the offsets given."""
    out = [
        DecisionMessage(0, e.entry["source"]["offset"], e.entry["record"]["candidate_id"], t)
        for e in entries
    ]
    return out + [DecisionMessage(0, offset, cid, t) for cid, offset in forged.items()]


class TestUnrecorded:
    """Issue 22: `audit verify` said intact (exit 0) with no recorder running — chains 0,
    entries 0 — and a forged outcome appended to `decisions` went unnamed."""

    def test_an_empty_audit_log_is_not_intact_while_candidates_exist(self):
        report = verify([], candidates("a", "b"), None, grace=60.0)
        assert not report.intact
        (problem,) = report.problems
        assert problem.kind == Finding.UNRECORDED and "audit record" in problem.detail

    def test_an_empty_audit_log_is_not_intact_while_decisions_exist(self):
        report = verify([], [], None, grace=60.0, decisions=decisions(log()))
        assert [p.kind for p in report.problems] == [Finding.UNRECORDED]
        assert "9 decision record(s)" in report.problems[0].detail
        # Past the grace, the records nobody chained are named too.
        report = verify([], [], None, grace=0.0, decisions=decisions(log()))
        assert [p.what for p in report.problems] == ["the audit log", "decisions[0]@0..@8"]
        assert "(a, b, c)" in report.problems[1].detail

    def test_nothing_at_all_is_intact(self):
        assert verify([], [], None, grace=60.0, decisions=[]).intact

    def test_every_decision_chained_is_intact(self):
        entries = log()
        assert check(entries, decisions=decisions(entries)).intact

    def test_a_forged_record_nobody_chained_is_named(self):
        entries = log()
        report = check(entries, decisions=decisions(entries, forged_b=9))
        (problem,) = report.problems
        assert problem.kind == Finding.UNRECORDED and problem.what == "decisions[0]@9"
        assert "forged_b" in problem.detail

    def test_a_recorder_within_the_grace_is_in_flight_beyond_it_a_problem(self):
        entries = log()
        late = [*decisions(entries), DecisionMessage(0, 9, "d", T0 + 30)]
        report = verify(entries, candidates("a", "b", "c"), None, grace=60.0, decisions=late)
        assert report.intact and [n.what for n in report.notes] == ["decisions[0]@9"]
        # 61 s older than the newest decision: the recorder is behind by more than the bound.
        stale = [*decisions(entries, t=T0 + 61), DecisionMessage(0, 9, "d", T0)]
        report = verify(entries, candidates("a", "b", "c"), None, grace=60.0, decisions=stale)
        assert [p.kind for p in report.problems] == [Finding.UNRECORDED]


class TestWorkerAllRecords:
    def test_worker_all_starts_the_audit_recorder_with_the_stages(self, monkeypatch, tmp_path):
        from workers.runtime import runner
        from workers.runtime.ladder import STAGE_NAMES
        from workers.runtime.settings import Settings

        started: list[list[str]] = []

        class Exited:  # a child that has already exited 0
            def __init__(self, command: list[str], **_: object) -> None:
                started.append(command)
                self.pid, self.returncode = 0, 0

            def poll(self) -> int:
                return 0

        monkeypatch.setattr(runner.subprocess, "Popen", Exited)
        monkeypatch.setattr(runner.signal, "signal", lambda *a: None)
        assert runner.run_all(Settings(data_dir=str(tmp_path)), "p.toml") == 0
        tails = [c[c.index("workers.cli") + 3 :] for c in started]
        assert ["audit", "record", "--policy", "p.toml"] in tails
        assert [["worker", n, "--policy", "p.toml"] for n in STAGE_NAMES] == tails[:-1]
