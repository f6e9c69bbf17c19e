"""The Grafana dashboard and the Prometheus scrape config name what the workers emit: a
renamed metric, label or port breaks this test, not the operator's dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from aiokafka.structs import TopicPartition
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.policy.breaker import BreakerStatus
from pipeline.policy.document import load_policy
from workers.interfaces import Inbound, StageContext
from workers.runtime.ladder import STAGE_NAMES
from workers.runtime.metrics import SERVED, StageMetrics, metrics_port
from workers.runtime.settings import Settings, SettingsError

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC = re.compile(r"\b(groundstream_[a-z_]+)\b(?:\{([^}]*)\})?")
BY = re.compile(r"\bby \(([^)]*)\)")
# PromQL words that look like label names inside `by (...)` but are not.
PROMQL_LABELS = {"le"}


def _populated() -> StageMetrics:
    """A worker's registry with one of everything observed, as after some traffic."""
    ctx = StageContext(policy=load_policy())
    ctx.services["encoder"] = SimpleNamespace(cache_lookups=10, cache_hits=7)
    stage = SimpleNamespace(
        pool=SimpleNamespace(kind="judge", breakers=lambda: {"default": BreakerStatus.OPEN})
    )
    m = StageMetrics("geometry", "candidates")
    m.follow(ctx, stage)
    m.observe_batch(3, 0.02)
    m.observe_record(
        {
            "stage": "geometry",
            "action": "scored",
            "score": 1.2,
            "method": "sgi",
            "timings": {"geometry": 12.5},
        }
    )
    m.observe_waits([Inbound(b"s", b"{}", "candidates", 0, 1, (), 1.0)], 3.0)
    m.observe_record({"stage": "outcome", "action": "accept", "topic": "state"})
    m.observe_record({"stage": "geometry", "action": "skip", "gate": "unknown_route"})
    m.count_emit("deadletter")
    m.control_holds.labels("geometry").inc()
    m.control_held.labels("geometry").inc(1.5)
    m.set_lag({0: 4})
    return m


def _exposed() -> dict[str, set[str]]:
    """Every sample name the registry exposes, with the label names it carries."""
    text = generate_latest(_populated().registry).decode()
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.endswith("_created"):  # prometheus_client's timestamps
                out.setdefault(sample.name, set()).update(sample.labels)
    return out


def _expressions() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "groundstream.json").read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_dashboard_uses_only_names_and_labels_the_workers_expose() -> None:
    exposed = _exposed()
    exprs = _expressions()
    used: set[str] = set()
    for expr in exprs:
        found = METRIC.findall(expr)
        assert found, f"no groundstream metric in {expr!r}"
        labels_here: set[str] = set()
        for name, matchers in found:
            assert name in exposed, f"{name} (in {expr!r}) is not exposed by the workers"
            used.add(name)
            labels_here |= exposed[name]
            for matcher in filter(None, matchers.split(",")):
                label = matcher.split("=")[0].strip(" !~")
                assert label in exposed[name], f"{name} has no label {label!r}"
        for group in BY.findall(expr):
            for label in (x.strip() for x in group.split(",")):
                assert label in labels_here | PROMQL_LABELS, f"by ({label}) in {expr!r}"
    # Every family the workers expose has a panel.
    families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in exposed}
    shown = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    assert families <= shown, f"not on the dashboard: {sorted(families - shown)}"


def test_a_panel_shows_each_stage_s_consumer_lag() -> None:
    """Which stage to scale: the panel sums the lag the workers export (each replica its own
    partitions) by stage, and that metric carries a `stage` label."""
    dashboard = json.loads((DEPLOY / "grafana" / "groundstream.json").read_text())
    by_stage = [
        p
        for p in dashboard["panels"]
        for t in p.get("targets", [])
        if re.fullmatch(r"sum by \(stage\) \((groundstream_[a-z_]+)\)", t["expr"])
    ]
    (panel,) = by_stage
    (target,) = panel["targets"]
    name = METRIC.search(target["expr"]).group(1)  # type: ignore[union-attr]
    exposed = _exposed()
    assert name == "groundstream_consumer_lag"
    assert "stage" in exposed[name]
    assert "{{stage}}" in target["legendFormat"]


def test_a_renamed_metric_would_be_caught() -> None:
    exposed = _exposed()
    assert "groundstream_decisions_total" in exposed
    assert "groundstream_decision_total" not in exposed  # the check is not vacuous
    assert any("groundstream_decisions_total" in e for e in _expressions())


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose" / "docker-compose.yml").read_text())


def test_prometheus_scrapes_each_stage_on_its_metrics_port() -> None:
    compose = _compose()
    env = compose["x-worker"]["environment"]
    settings = Settings.from_env(
        {"GROUNDSTREAM_METRICS_PORT": str(env["GROUNDSTREAM_METRICS_PORT"])}
    )
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    scraped = {name: sd["port"] for sd in job["dns_sd_configs"] for name in sd["names"]}
    assert scraped == {name: metrics_port(settings, name) for name in SERVED}
    for name in SERVED:
        service = compose["services"][name]
        assert service["environment"]["GROUNDSTREAM_METRICS_HOST"] == "0.0.0.0"
        assert "ports" not in service  # reachable on the compose network only
    assert set(compose["services"]["prometheus"]["profiles"]) == {"monitoring"}


def test_metrics_are_off_by_default_and_bound_to_loopback() -> None:
    settings = Settings.from_env({})
    assert metrics_port(settings, "geometry") is None
    assert settings.metrics_host == "127.0.0.1"


def test_each_stage_adds_its_ladder_index_to_the_base_port_and_the_recorder_follows() -> None:
    settings = Settings.from_env({"GROUNDSTREAM_METRICS_PORT": "9300"})
    assert [metrics_port(settings, n) for n in STAGE_NAMES] == [9300, 9301, 9302, 9303, 9304, 9305]
    assert metrics_port(settings, "recorder") == 9306


@pytest.mark.parametrize("raw", ["0", "70000", "nine"])
def test_a_bad_metrics_port_names_the_variable(raw: str) -> None:
    with pytest.raises(SettingsError, match="GROUNDSTREAM_METRICS_PORT"):
        Settings.from_env({"GROUNDSTREAM_METRICS_PORT": raw})


def test_a_base_port_without_room_for_every_stage_names_the_variable() -> None:
    settings = Settings.from_env({"GROUNDSTREAM_METRICS_PORT": "65534"})
    with pytest.raises(SettingsError, match="GROUNDSTREAM_METRICS_PORT"):
        metrics_port(settings, "rules")


def _samples(m: StageMetrics, name: str) -> dict[tuple[str, ...], float]:
    """`name`'s values keyed by their label values, in label-name order."""
    return {
        tuple(v for _, v in sorted(s.labels.items())): s.value
        for f in m.registry.collect()
        for s in f.samples
        if s.name == name
    }


def test_values_reach_the_exposition() -> None:
    m = _populated()
    assert _samples(m, "groundstream_decisions_total") == {
        ("scored", "geometry"): 1,
        ("skip", "geometry"): 1,
    }
    assert _samples(m, "groundstream_gates_total") == {("unknown_route", "geometry"): 1}
    assert _samples(m, "groundstream_outcomes_total") == {("geometry", "state"): 1}
    assert _samples(m, "groundstream_deadletters_total") == {("geometry",): 1}
    assert _samples(m, "groundstream_consumer_lag") == {("0", "geometry", "candidates"): 4}
    assert _samples(m, "groundstream_encoder_cache_hits_total") == {("geometry",): 7}
    assert _samples(m, "groundstream_breaker_open") == {("judge", "default", "geometry"): 1}
    assert _samples(m, "groundstream_kill_switch") == {("geometry",): 0}
    assert _samples(m, "groundstream_batch_size_count") == {("geometry",): 1}
    assert _samples(m, "groundstream_score_count") == {("sgi", "geometry"): 1}


class _Consumer:
    """The stage loop's AIOKafkaConsumer as the lag refresh sees it: assignment, high-water,
    position."""

    def __init__(self, high: dict[int, int | None], position: dict[int, int]) -> None:
        self.high, self.pos = high, position

    def assignment(self) -> set[TopicPartition]:
        sources = {TopicPartition("candidates", p) for p in self.high}
        return sources | {TopicPartition("decisions", 0)}  # not the stage's source: skipped

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.high[tp.partition]

    async def position(self, tp: TopicPartition) -> int:
        return self.pos[tp.partition]


async def test_lag_counts_from_the_last_processed_offset_or_the_fetch_position() -> None:
    m = StageMetrics("geometry", "candidates")
    m.processed(0, 9)
    m.processed(0, 4)  # an older offset of the same partition changes nothing
    await m.refresh_lag(_Consumer({0: 15, 1: 8, 2: None}, {0: 10, 1: 6}))
    lag = {k[0]: v for k, v in _samples(m, "groundstream_consumer_lag").items()}
    # 0: offsets 10..14 wait; 1: nothing processed yet, 6 and 7 wait; 2: no high-water yet.
    assert lag == {"0": 5, "1": 2}
    await m.refresh_lag(_Consumer({1: 8}, {1: 8}))  # partition 0 revoked, 1 caught up
    lag = {k[0]: v for k, v in _samples(m, "groundstream_consumer_lag").items()}
    assert lag == {"1": 0}
