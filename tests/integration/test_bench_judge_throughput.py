"""`bench judge-throughput` on the real broker, small and fast: a judge worker in flow
(issue 35) against the bench's scripted judge. Every answer is asked once, and a slow call
delays only its own answer: with 30% of calls taking 2 s and the rest ~50 ms, no ordinary
answer waits anywhere near 2 s (decided by batch, most would: a batch concluded with its
slowest call)."""

from __future__ import annotations

import pytest

from workers.bench import judge_throughput as jt

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_the_bench_measures_a_worker_that_waits_only_for_its_own_calls(
    kafka_bootstrap: str,
) -> None:
    opts = jt.Options(
        kafka_bootstrap,
        n=120,
        in_flight=16,
        endpoint_limit=16,
        p50_s=0.05,
        p99_s=0.2,
        rate=15.0,
        seconds=4.0,
        slow_share=0.3,
        slow_s=2.0,
    )
    result = jt.run(opts)
    notes = result.notes
    assert notes["burst calls"] == opts.n and notes["asked again"] == 0
    assert result.rates["ideal answers/s"] == pytest.approx(16 / notes["mean latency s"], rel=0.03)
    # No worker beats the ideal over a whole burst: its calls' time, 16 at once, is a floor.
    assert 0 < result.rates["whole burst answers/s"] <= result.rates["ideal answers/s"] * 1.02
    assert result.rates["answers/s"] > 0
    assert notes["slow calls"] >= 5
    assert notes["slowest ordinary s"] < 1.5  # none waited for a 2 s call not its own
