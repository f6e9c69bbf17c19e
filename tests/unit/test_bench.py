"""The benches' own logic, without a broker: inputs, figures, memory and the last line."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pipeline.encoding.chunks import context_chunks
from topics.codec import dumps
from workers.bench import data, ladder, latency
from workers.bench.data import (
    grounded_candidates,
    retag,
    shared_context_candidates,
    unique_candidates,
)
from workers.bench.kafka import candidate_id, decided_by
from workers.bench.latency import encode_ms, one_per_context, percentile
from workers.bench.procs import MIB, descendants, vm_hwm
from workers.bench.report import Result, memory_goal
from workers.bench.switch import steady_rate


def texts(candidates: list[dict]) -> list[str]:
    out = []
    for c in candidates:
        out += [c["question"], c["response"], *(context_chunks(c["context"]) or ())]
    return out


def test_unique_candidates_never_repeat_a_text_and_are_seeded():
    batch = unique_candidates(300, "t")
    assert len(set(texts(batch))) == len(texts(batch))
    assert unique_candidates(5, "t") == batch[:5]
    assert {c["id"] for c in batch} == {f"t-{i}" for i in range(300)}


def test_grounded_candidates_are_unique_seeded_and_name_only_their_context():
    # Built to reach state (bench latency): an answer restates its context's fact, so the
    # rules' source support finds every name and number of it in the context.
    batch = grounded_candidates(200, "g")
    assert len(set(texts(batch))) == len(texts(batch))
    assert grounded_candidates(5, "g") == batch[:5]
    for c in batch:
        named = {w.strip(".?,") for w in c["response"].split() if w[0].isupper() or w[0].isdigit()}
        context = c["context"].replace(".", " ").split()
        assert {w for w in named if w not in ("The", "It")} <= set(context), c


def test_shared_contexts_share_exactly_as_asked():
    shared = shared_context_candidates(50, 5, "s")
    unique = shared_context_candidates(50, 1, "u")
    contexts = [tuple(c["context"]) for c in shared]
    assert len(set(contexts)) == 10 and all(contexts.count(x) == 5 for x in set(contexts))
    assert len({tuple(c["context"]) for c in unique}) == 50
    assert len({c["question"] for c in shared}) == 50  # questions and answers stay unique
    assert all(len(c["context"]) == 3 for c in shared + unique)


def test_retag_cycles_rows_under_fresh_ids():
    rows = unique_candidates(3, "r")
    out = retag(rows, 7, "x")
    assert [c["id"] for c in out] == [f"x-{i}" for i in range(7)]
    assert out[4]["response"] == rows[1]["response"] and out[4]["session_id"] == "x-s4"


def test_candidate_ids_from_envelopes_records_and_candidates():
    assert candidate_id(dumps({"candidate": {"id": "a"}, "trail": []})) == "a"
    assert candidate_id(dumps({"candidate_id": "b", "stage": "switch"})) == "b"
    assert candidate_id(dumps({"id": "c"})) == "c"
    assert candidate_id(b"not json") is None
    match = decided_by("switch")
    assert match(dumps({"candidate_id": "b", "stage": "switch"})) == "b"
    assert match(dumps({"candidate_id": "b", "stage": "outcome"})) is None


def test_steady_rate_and_percentiles():
    assert steady_rate({"a": 10.0, "b": 10.5, "c": 11.0}) == 2.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) in (50.0, 51.0)
    assert percentile(values, 0.99) == 99.0


def test_result_line_says_figure_goal_verdict_and_memory():
    r = Result(
        "switch",
        0.42,
        0.5,
        "x",
        rates={"switch/s": 1234.5, "bare/s": 2939.0},
        peaks={"switch": 300 * MIB, "geometry[onnx]": 400 * MIB},
    )
    line = r.line()
    assert line.startswith("bench switch: 0.42x (goal >= 0.5x: NOT met)")
    assert "switch/s 1,234.5" in line
    assert "switch 300 OVER" in line and "geometry[onnx] 400," in line
    latency = Result("latency", 90.0, 120.0, "ms", lower_is_better=True)
    assert latency.meets and "goal <= 120ms: met" in latency.line()


def test_a_result_held_to_a_second_goal_meets_only_both():
    both = Result("geometry", 1.4, 1.3, "x", also={"stage/raw onnx": (0.97, 0.95)})
    assert both.meets
    assert both.line().startswith(
        "bench geometry: 1.40x (goal >= 1.3x, and stage/raw onnx 0.97 >= 0.95: met)"
    )
    short = Result("geometry", 1.4, 1.3, "x", also={"stage/raw onnx": (0.9, 0.95)})
    assert not short.meets and "0.90 >= 0.95: NOT met" in short.line()


def test_memory_goals_and_peak_of_this_process():
    assert memory_goal("geometry[torch]") == 1024 * MIB and memory_goal("switch") == 250 * MIB
    assert memory_goal("geometry[onnx]") == 400 * MIB
    assert memory_goal("geometry scoring + claims") == 1024 * MIB
    assert descendants(os.getpid())[0] == os.getpid()
    peak = vm_hwm(os.getpid())
    assert peak is not None and peak > 10 * MIB


def test_the_raw_side_encodes_what_the_geometry_stage_encodes():
    # The shipped policy reads claim support, so the stage encodes the answer's core (SGI),
    # its claims and the context's statements (claim head): the raw side must too.
    from workers.bench.data import texts_per_stage_batch

    class Windows:
        def windows(self, text: str) -> list[str]:
            return [text]

    c = {
        "question": "What is the capital of Australia?",
        "context": ["Canberra is the capital city of Australia. Sydney is its largest city."],
        "response": "The capital of Australia is Canberra.",
    }
    (batch,) = texts_per_stage_batch(Windows(), [c, dict(c)], batch_size=2)
    assert len(batch) == len(set(batch))  # deduplicated, as the stage's encoder call is
    assert {c["question"], c["context"][0], "Canberra"} <= set(batch)  # SGI on the core
    assert "The capital of Australia is Canberra." in batch  # the claim
    assert {"Canberra is the capital city of Australia.", "Sydney is its largest city."} <= set(
        batch
    )  # the context's statements


def test_latency_sends_no_context_twice():
    # A text sent twice is embedded once: the second candidate would skip the encode the
    # latency goal is measured against.
    rows = [
        {"id": "a", "context": ["one"], "response": "x"},
        {"id": "b", "context": ["one"], "response": "y"},  # a's context
        {"id": "c", "context": ["two"], "response": "x"},  # a's answer
        {"id": "d", "context": "two", "response": "z"},
        {"id": "e", "context": ["two"], "response": "w"},  # d's context, as a list
        {"id": "f", "context": ["three", "one"], "response": "v"},  # one of a's passages
        {"id": "g", "context": ["three", "four"], "response": "u"},
    ]
    assert [r["id"] for r in one_per_context(rows)] == ["a", "d", "g"]


def test_one_encode_is_measured_per_candidate_as_the_stage_reads_it():
    # A context given as one string or as chunks, parsed by the ladder's own parser: each
    # candidate gets the model time of scoring it alone (the cache is emptied between).
    rows = [
        {
            "id": "lat-string",
            "session_id": "s1",
            "question": "When did the bridge open?",
            "context": "The Harlow footbridge opened in 2004. It spans the River Tame.",
            "response": "It opened in 2004.",
        },
        {
            "id": "lat-chunks",
            "session_id": "s2",
            "question": "When did the bridge open?",
            "context": ["The Harlow footbridge opened in 2004.", "It spans the River Tame."],
            "response": "It opened in 2004.",
            "metadata": {"task": "QA"},
        },
    ]
    measured = encode_ms(rows)
    assert set(measured) == {"lat-string", "lat-chunks"}
    assert all(ms > 0 for ms in measured.values())


def test_the_audit_recorder_under_worker_all_is_named_in_the_memory_report():
    import subprocess
    import sys

    from workers.bench.procs import label

    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "audit", "record"]
    )
    try:
        # Popen returns at fork: wait (bounded) until the child has exec'd its command line.
        cmdline = Path(f"/proc/{child.pid}/cmdline")
        deadline = time.monotonic() + 10
        while b"record" not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert label(child.pid) == "recorder"
    finally:
        child.kill()
        child.wait()


def test_the_stage_profile_sees_the_encoder_thread_and_times_a_part():
    import asyncio
    import cProfile
    import pstats
    import threading

    from workers.bench.stage_profile import _Inline, _seconds

    async def where() -> int:
        asyncio.get_running_loop().set_default_executor(_Inline(1))
        return await asyncio.to_thread(threading.get_ident)

    assert asyncio.run(where()) == threading.get_ident()

    def nested(depth: int) -> int:
        return 0 if depth == 0 else 1 + nested(depth - 1)

    profiler = cProfile.Profile()
    profiler.enable()
    nested(50)
    profiler.disable()
    stats = pstats.Stats(profiler)
    outer = _seconds(stats, r"test_bench\.py:nested$")
    total = sum(v[3] for k, v in stats.stats.items())  # type: ignore[attr-defined]
    assert 0 < outer <= total
    assert _seconds(stats, r"no such function$") == 0


def test_every_part_of_the_stage_profile_names_a_function_that_exists():
    # A part whose file moved would silently time 0 s: each project path must still define it.
    import re
    from pathlib import Path

    from workers.bench.stage_profile import PARTS

    root = Path(__file__).resolve().parents[2]
    named = [m for p in PARTS.values() for m in re.finditer(r"((?:\w+/)+\w+)\\\.py:(\w+)\$", p)]
    project = [(f"{m[1]}.py", m[2]) for m in named if (root / m[1].split("/")[0]).is_dir()]
    assert len(project) >= 4
    for path, function in project:
        assert re.search(rf"def {function}\(", (root / path).read_text()), (path, function)


def test_a_partition_flows_again_at_its_first_decision_of_a_probe_sent_after_the_signal():
    from workers.bench.scale import flowing_after

    # Partition 0: decided before and after the signal at 10.0; partition 1 stood still
    # until 21.5 (its probe sent at 10.2); partition 2's only decision is of an old probe.
    sent = {"a": (0, 9.5), "b": (0, 10.1), "c": (1, 9.9), "d": (1, 10.2), "e": (2, 9.0)}
    arrivals = {"a": 9.7, "b": 10.3, "c": 21.4, "d": 21.5, "e": 21.6, "unknown": 10.5}
    assert flowing_after(sent, arrivals, 10.0) == {0: 10.3, 1: 21.5}
    assert flowing_after(sent, {**arrivals, "f": 10.9}, 10.0) == {0: 10.3, 1: 21.5}
    assert flowing_after({**sent, "f": (0, 10.6)}, {**arrivals, "f": 10.9}, 10.0)[0] == 10.3


def test_the_scale_report_says_the_cores_the_rates_and_each_failover():
    from workers.bench.scale import FAILOVER_GOAL_S

    result = Result(
        "scale",
        11.2,
        FAILOVER_GOAL_S,
        "s",
        lower_is_better=True,
        rates={"cores": 2, "1 replica/s": 25.0, "kill -9 s": 11.2, "SIGTERM leaving s": 1.4},
        also={"two over one": (1.5, 1.7)},
    )
    line = result.line()
    assert line.startswith("bench scale: 11.20s (goal <= 15s, and two over one 1.50 >= 1.7")
    assert "NOT met" in line  # the failover met, the scaling not: the run does not meet
    assert "cores 2; 1 replica/s 25.0; kill -9 s 11.2; SIGTERM leaving s 1.4" in line


def test_the_latency_pool_takes_ragtruths_accepted_rows_first_then_fills_with_synthetic(
    tmp_path: Path, monkeypatch
):
    # RAGTruth's dev split is not beside a fresh clone: a file in its format stands in,
    # two rows the shipped policy accepts (built grounded) and one it never does (no
    # context). Its accepted rows come first, under their own ids; synthetic ones fill up.
    grounded = grounded_candidates(2, "ragtruth-like", seed=7)
    rows = [
        {**{k: c[k] for k in ("question", "context", "response")}, "id": f"ragtruth-{i}"}
        | {"session_id": f"ragtruth-{i}", "turn": 1, "initiator": "user", "metadata": {}}
        for i, c in enumerate(grounded)
    ]
    rows.append(rows[0] | {"id": "ragtruth-2", "context": None, "response": "Made up."})
    path = tmp_path / "ragtruth_dev.jsonl"
    path.write_bytes(b"\n".join(dumps(r) for r in rows) + b"\n")
    monkeypatch.setattr(ladder, "ragtruth", lambda limit=None: data.ragtruth(limit, path))
    pool, counts = latency.draw("ragtruth", 4)
    assert counts == {"ragtruth dev": 2, "synthetic grounded": 2}
    assert [r["response"] for r in pool[:2]] == [r["response"] for r in rows[:2]]
    assert all(r["id"].startswith("latency-pool") for r in pool[:2])
    assert all(r["id"].startswith("latency-grounded") for r in pool[2:])
