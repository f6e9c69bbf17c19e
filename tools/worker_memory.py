"""The geometry worker's memory, step by step, without Kafka (issue 33's figures).

    PYTHONPATH=. python tools/worker_memory.py [--backend torch|onnx]

Loads the encoder as the worker does, then scores the candidates `bench cache --n 200`
sends (64 warm-up, 200 unique contexts, 200 five to a context) with the stage's own
`_score_by_route`, 64 at a time in a thread, and prints VmRSS / VmHWM (MiB) after each.
"""

from __future__ import annotations

import argparse
import asyncio

import numpy as np


def status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM", "Threads")):
                key, value = line.split(":")
                n = int(value.split()[0])
                out[key] = n if key == "Threads" else n // 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="torch", choices=["torch", "onnx", "onnx-int8"])
    args = parser.parse_args()
    print("start", status(), flush=True)
    from pipeline.encoding.encoder import load_encoder
    from pipeline.policy.defaults import default_policy
    from topics.codec import dumps
    from topics.schema import parse_candidate
    from workers.bench.data import shared_context_candidates
    from workers.runtime.settings import Settings
    from workers.stages.geometry import _score_by_route

    policy = default_policy()
    encoder = load_encoder(policy.encoder_model, args.backend, Settings().encoder_cache_rows)
    print("encoder loaded", status(), flush=True)

    class Envelope:  # what `_score_by_route` reads of one
        def __init__(self, candidate: object) -> None:
            self.candidate, self.route = candidate, "default"

    reference = np.array(policy.reference)
    sets = {
        "warm-up": shared_context_candidates(64, 1, "cache-warm"),
        "unique": shared_context_candidates(200, 1, "cache-unique"),
        "shared": shared_context_candidates(200, 5, "cache-shared"),
    }

    async def run() -> None:
        for name, candidates in sets.items():
            for i in range(0, len(candidates), 64):
                batch = [Envelope(parse_candidate(dumps(c))) for c in candidates[i : i + 64]]
                await asyncio.to_thread(_score_by_route, batch, encoder, reference, policy, "")
                print(f"{name} {i + len(batch)}", status(), flush=True)

    asyncio.run(run())
    print("peak", status()["VmHWM"], "MiB", flush=True)


if __name__ == "__main__":
    main()
