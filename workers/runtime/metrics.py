"""Prometheus metrics of one worker process, served as text on `/metrics`.

Opt-in: with GROUNDSTREAM_METRICS_PORT unset nothing listens. When set, each stage serves
on that base port plus its index in the ladder (geometry +0, switch +1, consistency +2,
judge +3, rules +4, terminal +5) and the audit recorder after them (+6), so `worker all` on
one host and one container per worker expose the same, predictable addresses; the bind
address is GROUNDSTREAM_METRICS_HOST (127.0.0.1).
Every worker has its own `CollectorRegistry`, so a test process can hold several.

Names are `groundstream_*`; tests/unit/test_metrics_names.py checks the Grafana dashboard
(deploy/grafana/) and the Prometheus scrape config (deploy/prometheus/) against them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from workers.interfaces import Inbound, StageContext
from workers.runtime.ladder import STAGE_NAMES
from workers.runtime.settings import PREFIX, Settings, SettingsError
from workers.stages.judge_ledger import JudgeBook
from workers.stages.recorder import RecorderStage

SCORE_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0)
"""Covers P(grounded) and judge p_yes (0–1), DGI (≤ 1) and SGI (up to ~5, strong cut ~4)."""
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
WAIT_BUCKETS = (*SECONDS_BUCKETS, 60.0, 120.0, 300.0)
"""A candidate can wait minutes behind a slow batch: the tail must show it."""

SERVED = (*STAGE_NAMES, RecorderStage.name)
"""Every worker that serves `/metrics`, in port order: the ladder's stages, then the audit
recorder (not a stage of the ladder, but a worker an operator watches like one)."""

LAG_INTERVAL = 1.0
"""Seconds between refreshes of the lag gauge."""
MAX_TENANTS = 100
"""Tenants with series of their own; the rest count as "(other)" (label cardinality)."""
OTHER_TENANT = "(other)"


def metrics_port(settings: Settings, stage: str) -> int | None:
    """This worker's port: the base port plus its index in `SERVED`; None when metrics are
    off."""
    if not settings.metrics_port:
        return None
    port = settings.metrics_port + SERVED.index(stage)
    if port > 65535:
        raise SettingsError(
            PREFIX + "METRICS_PORT",
            str(settings.metrics_port),
            f"a port at most {65535 - len(SERVED) + 1} (one port per worker above it)",
        )
    return port


class StageMetrics:
    """The metrics of one stage worker, in a registry of its own."""

    def __init__(self, stage: str, source: str, registry: CollectorRegistry | None = None) -> None:
        self.stage, self.source = stage, source
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "groundstream_decisions",
            "Decision records written, by stage and action",
            ["stage", "action"],
            registry=r,
        )
        self.outcomes = Counter(
            "groundstream_outcomes",
            "Candidates concluded by this stage, by the terminal topic they went to",
            ["stage", "topic"],
            registry=r,
        )
        self.emits = Counter(
            "groundstream_emits", "Messages sent, by topic", ["stage", "topic"], registry=r
        )
        self.gates = Counter(
            "groundstream_gates",
            "Candidates a gate held or diverted (no_evidence, deadline, kill_switch,"
            " unknown_route, …), by stage and gate",
            ["stage", "gate"],
            registry=r,
        )
        self.deadletters = Counter(
            "groundstream_deadletters",
            "Messages parked on the dead-letter topic",
            ["stage"],
            registry=r,
        )
        self.batch_seconds = Histogram(
            "groundstream_batch_duration_seconds",
            "Time to process one batch, sends acknowledged",
            ["stage"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "groundstream_batch_size",
            "Messages per batch",
            ["stage"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.scores = Histogram(
            "groundstream_score",
            "Scores on decision records, by stage and scoring method",
            ["stage", "method"],
            buckets=SCORE_BUCKETS,
            registry=r,
        )
        self.lag = Gauge(
            "groundstream_consumer_lag",
            "Messages on the source partition after the last one this worker processed",
            ["stage", "topic", "partition"],
            registry=r,
        )
        self.kill_switch = Gauge(
            "groundstream_kill_switch",
            "1 while this worker sees the kill switch on",
            ["stage"],
            registry=r,
        )
        self.decision_seconds = Histogram(
            "groundstream_decision_seconds",
            "A decision's stage time, as its record's timings say: from the batch's receipt"
            " to the decision, queueing behind the batch's other candidates included",
            ["stage"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "groundstream_queue_wait_seconds",
            "How long a message waited on the stage's source topic before the stage received"
            " it (its broker timestamp to the fetch; consumer lag in time, apart from the"
            " decision's own timing)",
            ["stage"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.control_unknown = Gauge(
            "groundstream_control_unknown",
            "1 while this worker does not know the kill switch's state (batches are held)",
            ["stage"],
            registry=r,
        )
        self.control_holds = Counter(
            "groundstream_control_holds_total",
            "Batches held uncommitted because the kill switch's state was unknown",
            ["stage"],
            registry=r,
        )
        self.control_held = Counter(
            "groundstream_control_held_seconds_total",
            "Seconds batches were held waiting for the kill switch's state",
            ["stage"],
            registry=r,
        )
        self.judge_calls = Counter(
            "groundstream_judge_calls",
            "Requests sent to the judge endpoint, by route and tenant",
            ["stage", "route", "tenant"],
            registry=r,
        )
        self.judge_tokens = Counter(
            "groundstream_judge_tokens",
            "Tokens the judge's requests spent (the reply's usage, else an estimate), by route"
            " and tenant",
            ["stage", "route", "tenant"],
            registry=r,
        )
        self.judge_cache_hits = Counter(
            "groundstream_judge_cache_hits",
            "Judge verdicts answered from the verdict cache, without a call, by route",
            ["stage", "route"],
            registry=r,
        )
        self._tenants: set[str] = set()
        self._lag_keys: set[str] = set()
        self.serving = False  # set by serve_metrics: only then is the lag worth refreshing
        self._processed: dict[int, int] = {}  # source partition → last offset processed

    def observe_batch(self, size: int, seconds: float) -> None:
        self.batch_size.labels(self.stage).observe(size)
        self.batch_seconds.labels(self.stage).observe(seconds)

    def observe_record(self, record: dict[str, Any]) -> None:
        """Count one decision record (a stage's verdict or a candidate's outcome)."""
        if record.get("stage") == "outcome":
            self.outcomes.labels(self.stage, str(record.get("topic"))).inc()
            return
        self.decisions.labels(self.stage, str(record.get("action"))).inc()
        if record.get("gate"):
            self.gates.labels(self.stage, str(record["gate"])).inc()
        ms = (record.get("timings") or {}).get(record.get("stage"))
        if isinstance(ms, int | float) and not isinstance(ms, bool):
            self.decision_seconds.labels(self.stage).observe(ms / 1000.0)
        score = record.get("score")
        if isinstance(score, int | float):
            self.scores.labels(self.stage, str(record.get("method") or "none")).observe(score)
        if record.get("stage") == "judge" and isinstance(record.get("evidence"), dict):
            self._judge(str(record.get("route")), record["evidence"])

    def tenant_label(self, tenant: str) -> str:
        """`tenant` as a label value: the first `MAX_TENANTS` seen keep their own."""
        if tenant in self._tenants or len(self._tenants) < MAX_TENANTS:
            self._tenants.add(tenant)
            return tenant
        return OTHER_TENANT

    def _judge(self, route: str, evidence: dict[str, Any]) -> None:
        """Calls and tokens a judge record says were spent, and cache hits."""
        if evidence.get("cache") == "hit":
            self.judge_cache_hits.labels(self.stage, route).inc()
        calls = evidence.get("calls")
        sent = [c for c in calls if isinstance(c, dict) and c.get("tokens")] if calls else []
        if not sent:
            return
        tenant = self.tenant_label(str(evidence.get("tenant") or ""))
        self.judge_calls.labels(self.stage, route, tenant).inc(len(sent))
        spent = evidence.get("tokens") or {}
        tokens = sum(
            n
            for n in (spent.get("prompt_tokens"), spent.get("completion_tokens"))
            if isinstance(n, int) and not isinstance(n, bool) and n > 0
        )
        self.judge_tokens.labels(self.stage, route, tenant).inc(tokens)

    def observe_waits(self, items: Sequence[Inbound], arrived: float) -> None:
        """Each message's wait on the source topic: `arrived` (wall clock, when the fetch
        returned it) less its broker timestamp. Clocks of different hosts may disagree:
        a negative wait counts as none."""
        for item in items:
            if item.timestamp is not None:
                self.queue_wait.labels(self.stage).observe(max(0.0, arrived - item.timestamp))

    def count_emit(self, topic: str) -> None:
        self.emits.labels(self.stage, topic).inc()
        if topic == "deadletter":
            self.deadletters.labels(self.stage).inc()

    def processed(self, partition: int, offset: int) -> None:
        """Note that the message at `offset` of the source partition has been handled."""
        if offset > self._processed.get(partition, -1):
            self._processed[partition] = offset

    async def refresh_lag(self, consumer: Any) -> None:
        """Lag of each assigned source partition, from the stage's consumer: its high-water
        mark less the next offset to process (the fetch position before the first message)."""
        lags: dict[int, int] = {}
        for tp in consumer.assignment():
            if tp.topic != self.source:
                continue
            try:
                high = consumer.highwater(tp)
            except AssertionError:  # aiokafka's answer for a partition just revoked
                continue
            if high is None:  # nothing fetched from the partition yet
                continue
            # The fetch position skips the markers that close each transaction upstream,
            # which the high-water mark counts: past the last message processed, it is next.
            done = self._processed.get(tp.partition)
            position = await consumer.position(tp)
            upcoming = position if done is None else max(done + 1, position)
            if upcoming is not None:
                lags[tp.partition] = max(high - upcoming, 0)
        self.set_lag(lags)

    def set_lag(self, lags: dict[int, int]) -> None:
        """Replace the lag series by `lags` (source partition → messages behind)."""
        keys = {str(partition) for partition in lags}
        for partition in self._lag_keys - keys:
            self.lag.remove(self.stage, self.source, partition)
        for partition, behind in lags.items():
            self.lag.labels(self.stage, self.source, str(partition)).set(behind)
        self._lag_keys = keys

    def follow(self, ctx: StageContext, stage: object) -> None:
        """Read the kill switch, the encoder cache and the stage's breakers at scrape time."""
        self.kill_switch.labels(self.stage).set_function(lambda: float(ctx.control.kill_switch))
        self.control_unknown.labels(self.stage).set_function(lambda: float(not ctx.control.known))
        self.registry.register(_LiveCollector(self.stage, ctx, stage))


class _LiveCollector(Collector):
    """Values owned by other objects, read when Prometheus scrapes."""

    def __init__(self, stage: str, ctx: StageContext, stage_obj: object) -> None:
        self.stage, self.ctx, self.stage_obj = stage, ctx, stage_obj

    def collect(self) -> Iterable[Metric]:
        yield from self._cache()
        yield from self._breakers()
        yield from self._judge_budget()

    def _judge_budget(self) -> Iterator[Metric]:
        """What is left of each judge budget on this worker's partitions (the group's total
        is the sum over its workers): the judge's table, read at scrape time."""
        ledger = getattr(self.stage_obj, "ledger", None)
        gate = getattr(self.stage_obj, "gate", None)
        if ledger is None or gate is None:
            return
        partitions = max(1, self.ctx.source_partitions)
        held = getattr(ledger, "partitions", None)
        held = frozenset(range(partitions)) if held is None else frozenset(held)
        book = JudgeBook(ledger, gate.window + gate.guard)
        rows = book.left(self.ctx.policy, partitions, held, self.ctx.clock())
        left = GaugeMetricFamily(
            "groundstream_judge_budget_left",
            "Judge calls (this minute) or tokens (this day) still to spend on this worker's"
            " partitions, by route and tenant (empty: the route's own budget)",
            labels=["stage", "route", "tenant", "budget"],
        )
        share = GaugeMetricFamily(
            "groundstream_judge_budget_share",
            "This worker's partitions' share of each judge budget, by route and tenant",
            labels=["stage", "route", "tenant", "budget"],
        )
        tenants: set[str] = set()
        for route, tenant, budget, remaining, total in rows:
            if tenant and tenant not in tenants and len(tenants) >= MAX_TENANTS:
                continue
            tenants.add(tenant)
            left.add_metric([self.stage, route, tenant, budget], float(remaining))
            share.add_metric([self.stage, route, tenant, budget], float(total))
        yield left
        yield share

    def _cache(self) -> Iterator[Metric]:
        encoder = self.ctx.services.get("encoder")
        if encoder is None or not hasattr(encoder, "cache_lookups"):
            return
        # Each name and help a literal: docs/reference/metrics.md is read from these calls.
        lookups = CounterMetricFamily(
            "groundstream_encoder_cache_lookups", "Texts embedded", labels=["stage"]
        )
        hits = CounterMetricFamily(
            "groundstream_encoder_cache_hits", "Texts found in the cache", labels=["stage"]
        )
        lookups.add_metric([self.stage], encoder.cache_lookups)
        hits.add_metric([self.stage], encoder.cache_hits)
        yield lookups
        yield hits

    def _breakers(self) -> Iterator[Metric]:
        pool = getattr(self.stage_obj, "pool", None)
        if pool is None:
            return
        family = GaugeMetricFamily(
            "groundstream_breaker_open",
            "1 while the route's breaker to the endpoint is open or half-open",
            labels=["stage", "endpoint", "route"],
        )
        for route, status in pool.breakers().items():
            family.add_metric([self.stage, pool.kind, route], float(status.value != "closed"))
        yield family


def serve_metrics(prometheus: StageMetrics, settings: Settings) -> bool:
    """Serve `/metrics` for this stage when GROUNDSTREAM_METRICS_PORT is set (a daemon
    thread of prometheus_client); True when serving. The stage loop refreshes the lag
    gauge every LAG_INTERVAL seconds meanwhile."""
    port = metrics_port(settings, prometheus.stage)
    if port is None:
        return False
    try:
        start_http_server(port, addr=settings.metrics_host, registry=prometheus.registry)
    except OSError as exc:
        raise SettingsError(
            PREFIX + "METRICS_PORT",
            str(settings.metrics_port),
            f"a base port whose {prometheus.stage} port {settings.metrics_host}:{port} "
            f"can be bound ({exc.strerror})",
        ) from None
    prometheus.serving = True
    return True
