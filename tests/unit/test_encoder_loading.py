"""When a worker loads the sentence encoder: before joining only if every candidate needs
it, and once, however many threads ask at the same time."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from pipeline.policy.defaults import default_policy
from workers.clients import encoder as stage_encoders
from workers.interfaces import StageContext
from workers.runtime.ladder import LADDER, row
from workers.runtime.settings import Settings


def test_only_geometry_and_a_sampling_consistency_stage_preload():
    plain = Settings(topic_prefix="t.")
    sampling = Settings(topic_prefix="t.", sampler_url="http://127.0.0.1:9/v1")
    nli = Settings(topic_prefix="t.", sampler_url="http://127.0.0.1:9/v1", nli_model="/m")
    assert row("geometry").preload_encoder(plain)
    assert not row("consistency").preload_encoder(plain)  # samples only if candidates bring them
    assert row("consistency").preload_encoder(sampling)
    assert not row("consistency").preload_encoder(nli)  # compares with the NLI model instead
    others = [r for r in LADDER if r.name not in ("geometry", "consistency")]
    assert not any(r.preload_encoder(sampling) for r in others)


def test_threads_asking_at_once_load_one_encoder(monkeypatch):
    loads = []
    gate = threading.Event()

    def slow_load(model, backend, cache_rows):
        loads.append((model, backend))
        gate.wait(1.0)  # every other thread asks while this one loads
        return object()

    monkeypatch.setattr(stage_encoders, "load_encoder", slow_load)
    ctx = StageContext(policy=default_policy())
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(stage_encoders.stage_encoder, ctx) for _ in range(8)]
        time.sleep(0.2)
        gate.set()
        got = {id(f.result()) for f in futures}
    assert len(loads) == 1
    assert len(got) == 1
