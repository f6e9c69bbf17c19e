"""Dashboard state: live aggregates of decision records, and the last records in two forms.

Every record the feed reads is folded into one `DashboardState` owned by the app: bounded
counters, the last N records, score histograms (the SGI/DGI each geometry record carries
and the P(grounded) the switch routes on), per-stage latency windows and outcomes per
minute. Each record is kept twice, both made from the record as read: sanitized
(`pipeline.trail.records.sanitize`, for a request with a credential) and its public
projection (`pipeline.trail.disclosure.public_record`, an allow-list, for anyone else).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipeline.scores.grounding import LONG_FORM
from pipeline.trail.disclosure import public_record, word
from pipeline.trail.records import OUTCOME_STAGE, iso_time, sanitize
from topics.codec import loads
from topics.names import TERMINAL, Topic
from workers.interfaces import ControlState
from workers.runtime.control import apply_control

# Score ranges of the geometry histograms: (low, high, bins); values outside count as
# under/over (the SGI sentinel 10.0 lands in `over`). SGI spans 0-5 so that calibrated
# strong-pass cuts (4.08 in the bundled policy) fall on the axis.
HISTOGRAM_RANGES: dict[str, tuple[float, float, int]] = {
    "grounding": (0.0, 1.0, 20),
    "grounding_long": (0.0, 1.0, 20),
    "sgi": (0.0, 5.0, 50),
    "dgi": (-1.0, 1.0, 20),
}
GROUNDING = "grounding"  # the histogram of P(grounded), from the geometry record's evidence
# Long-form answers (several sentences, or a context of several windows) have their own
# cuts (`grounding_accept_long`, `grounding_review_long`), so their P(grounded) gets its
# own histogram under those cuts; a record without features counts as short.
GROUNDING_LONG = "grounding_long"
LATENCY_WINDOW = 1000  # per stage: percentiles over the last this-many timings
DEFAULT_RANGE = (0.0, 1.0, 20)
MAX_KEYS = 200  # distinct values kept per counter; the rest count as "(other)"
MAX_NAME = 80  # route and tenant ids longer than this are cut


# ----------------------------------------------------------------------- state --


@dataclass(frozen=True, slots=True)
class Shown:
    """One record as the dashboard may serve it: `full` (sanitized) to a request with a
    credential, `public` (the allow-listed projection) to one without."""

    full: dict[str, Any]
    public: dict[str, Any]

    def to(self, full: bool) -> dict[str, Any]:
        return self.full if full else self.public


class BoundedCounter:
    """A Counter with at most `limit` distinct keys: junk on the topic cannot grow it."""

    OTHER = "(other)"

    def __init__(self, limit: int = MAX_KEYS) -> None:
        self.limit = limit
        self.counts: Counter[str] = Counter()

    def add(self, key: str, n: int = 1) -> None:
        if key not in self.counts and len(self.counts) >= self.limit:
            key = self.OTHER
        self.counts[key] += n

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts.most_common())


class Histogram:
    def __init__(self, lo: float, hi: float, bins: int) -> None:
        self.lo, self.hi = lo, hi
        self.bins = [0] * bins
        self.under = self.over = 0

    def add(self, x: float) -> None:
        if x < self.lo:
            self.under += 1
        elif x >= self.hi:
            self.over += 1
        else:
            i = int((x - self.lo) / (self.hi - self.lo) * len(self.bins))
            self.bins[min(i, len(self.bins) - 1)] += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "lo": self.lo,
            "hi": self.hi,
            "bins": list(self.bins),
            "under": self.under,
            "over": self.over,
            "count": sum(self.bins) + self.under + self.over,
        }


def _label(value: Any, default: str = "?") -> str:
    """A stage, action, topic, gate ... as the summary shows it: only an identifier-shaped
    word the code writes (`disclosure.word`), else `default`. The summary is public: a
    forged record's free text in one of these fields must not reach it."""
    return word(value) or default


def _id(value: Any, default: str = "?") -> str:
    """A producer- or policy-chosen id (route, tenant) as a short label: public anyway in
    the projection, bounded here (fields off the topic may hold anything)."""
    if value is None or value == "":
        return default
    return str(value)[:MAX_NAME]


def _epoch(iso: Any) -> float | None:
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    x = float(value)
    return x if math.isfinite(x) else None


def _cut(value: Any) -> float | str | None:
    """A threshold as records carry it: a finite number, or "inf" for an accept cut that
    accepts nothing (JSON has no infinity), kept as that string for the page."""
    return "inf" if value == "inf" else _number(value)


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank `q`-th percentile (0-100) of `values`; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class Minute:
    """One minute of records: how many, and the outcomes by topic."""

    __slots__ = ("decisions", "outcomes")

    def __init__(self) -> None:
        self.decisions = 0
        self.outcomes = BoundedCounter(20)


class DashboardState:
    """Everything the dashboard knows, bounded; fed by a `Feed`, read by the handlers."""

    def __init__(
        self,
        *,
        recent: int = 500,
        trails: int = 2000,
        trail_length: int = 32,
        minutes: int = 60,
        seen_hashes: int = 20000,
        subscriber_queue: int = 1000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.control = ControlState()
        self.records = 0
        self.malformed = 0
        self.duplicates = 0
        self.outcomes = BoundedCounter()
        self.stage_actions: dict[str, BoundedCounter] = {}
        self.routes: dict[str, BoundedCounter] = {}
        self.gates = BoundedCounter()
        self.breakers: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.judge_budget: OrderedDict[tuple[str, str, int], dict[str, Any]] = OrderedDict()
        """The last judge budget figures recorded per (route, tenant, input partition)."""
        self.histograms: dict[str, Histogram] = {}
        self.thresholds: dict[str, float | str] = {}
        self.recent: deque[Shown] = deque(maxlen=recent)
        self.trails: OrderedDict[str, deque[Shown]] = OrderedDict()
        self.max_trails, self.trail_length = trails, trail_length
        self.minutes: dict[int, Minute] = {}
        self.latency: dict[str, deque[float]] = {}
        self.total_latency: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.max_minutes = minutes
        self.seconds: dict[int, int] = {}
        self.last_decided_at: str | None = None
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._max_seen = seen_hashes
        self.subscribers: set[asyncio.Queue[Shown | None]] = set()
        self.subscriber_queue = subscriber_queue
        self.dropped_events = 0

    # -- feeding ----------------------------------------------------------------

    def apply_control(self, key: bytes | None, value: bytes | None) -> None:
        apply_control(self.control, key, value)

    def ingest_bytes(self, value: bytes | None) -> None:
        try:
            record = loads(value) if value is not None else None
        except ValueError:
            record = None
        self.ingest(record)

    def ingest(self, record: Any) -> dict[str, Any] | None:
        """Fold one decision record in; returns its sanitized form (None if skipped)."""
        if not isinstance(record, Mapping) or not isinstance(record.get("candidate_id"), str):
            self.malformed += 1
            return None
        digest = record.get("hash")
        if isinstance(digest, str):
            if digest in self._seen:
                self.duplicates += 1
                return None
            self._seen[digest] = None
            if len(self._seen) > self._max_seen:
                self._seen.popitem(last=False)
        clean = sanitize(record)
        # The projection is made from the record as read, not from `clean`: it counts what
        # sanitize drops (interpretations, rule hits) and names none of it.
        shown = Shown(clean, public_record(record))
        self.records += 1
        stage = _label(record.get("stage"))
        action = _label(record.get("action"))
        is_outcome = stage == OUTCOME_STAGE
        if "topic" in record:
            self.outcomes.add(_label(record.get("topic")))
        if is_outcome:
            route_name, mode = _id(record.get("route")), _label(record.get("mode"))
            if not record.get("route") and record.get("topic") == Topic.DEADLETTER.value:
                # Dead-lettered before a route was read: no route or mode to show.
                route_name, mode = "dead-lettered", "before routing"
            self.routes.setdefault(route_name, BoundedCounter(20)).add(mode)
        else:
            self.stage_actions.setdefault(stage, BoundedCounter(50)).add(action)
            if record.get("gate"):
                self.gates.add(_label(record.get("gate")))
        self._breakers(record)
        self._judge_budget(record, stage)
        self._histogram(record, stage)
        self._latency(record, stage, is_outcome)
        self._time(record, is_outcome)
        self.recent.append(shown)
        self._trail(record["candidate_id"], shown)
        self._publish(shown)
        return clean

    def _breakers(self, record: Mapping[str, Any]) -> None:
        breaker = record.get("breaker")
        if not isinstance(breaker, Mapping):
            return
        for endpoint, status in breaker.items():
            key = f"{_label(endpoint)}@{_id(record.get('route'))}"
            self.breakers[key] = {
                "endpoint": _label(endpoint),
                "route": _id(record.get("route")),
                "state": _label(status),
                "at": record.get("decided_at"),
            }
            self.breakers.move_to_end(key)
            if len(self.breakers) > MAX_KEYS:
                self.breakers.popitem(last=False)

    def _judge_budget(self, record: Mapping[str, Any], stage: str) -> None:
        """A judge record's budget figures: what was left of each share when it decided."""
        evidence = record.get("evidence")
        budget = evidence.get("budget") if isinstance(evidence, Mapping) else None
        if stage != "judge" or not isinstance(budget, Mapping):
            return
        partition = budget.get("partition")
        if isinstance(partition, bool) or not isinstance(partition, int):
            return
        route = _id(record.get("route"))
        for scope in ("route", "tenant"):
            figures = budget.get(scope)
            if not isinstance(figures, Mapping):
                continue
            tenant = _id(figures.get("name"), "") if scope == "tenant" else ""
            key = (route, tenant, partition)
            self.judge_budget[key] = {
                k: n
                for k in ("calls_left", "calls_share", "tokens_left", "tokens_share")
                if (n := _number(figures.get(k))) is not None
            } | {"partitions": _number(budget.get("partitions"))}
            self.judge_budget.move_to_end(key)
            if len(self.judge_budget) > MAX_KEYS:
                self.judge_budget.popitem(last=False)

    def _judge_spend(self) -> list[dict[str, Any]]:
        """Spend against budget per route and tenant: the partitions seen, summed."""
        totals: dict[tuple[str, str], dict[str, Any]] = {}
        for (route, tenant, _), figures in self.judge_budget.items():
            total = totals.setdefault(
                (route, tenant), {"route": route, "tenant": tenant, "partitions_seen": 0}
            )
            total["partitions_seen"] += 1
            total["partitions"] = figures.get("partitions")
            for k in ("calls_left", "calls_share", "tokens_left", "tokens_share"):
                if k in figures:
                    total[k] = total.get(k, 0) + figures[k]
        return [totals[k] for k in sorted(totals)]

    def _histogram(self, record: Mapping[str, Any], stage: str) -> None:
        score = _number(record.get("score"))
        if stage != "geometry" or score is None:
            return
        self._count_score(_label(record.get("method")), score)
        evidence = record.get("evidence")
        if isinstance(evidence, Mapping):
            probability = _number(evidence.get("grounding_probability"))
            if probability is not None:
                features = evidence.get("features")
                long_form = isinstance(features, Mapping) and _number(features.get(LONG_FORM))
                self._count_score(GROUNDING_LONG if long_form else GROUNDING, probability)
        thresholds = record.get("thresholds")
        if isinstance(thresholds, Mapping) and thresholds:  # the policy's, as last seen
            self.thresholds = {
                k: x for k, v in thresholds.items() if word(k) and (x := _cut(v)) is not None
            }

    def _cuts_of(self, method: str) -> dict[str, float | str]:
        """The policy's cuts on one histogram's axis, named ``<method>_<cut>``: the
        long-form cuts (``grounding_accept_long``) belong to the long-form histogram
        (``grounding_long_accept``), not to the short one."""
        if method == GROUNDING_LONG:
            prefix, suffix = GROUNDING + "_", "_long"
            return {
                f"{GROUNDING_LONG}_{k[len(prefix) : -len(suffix)]}": v
                for k, v in self.thresholds.items()
                if k.startswith(prefix) and k.endswith(suffix)
            }
        return {
            k: v
            for k, v in self.thresholds.items()
            if k.startswith(method + "_") and not k.endswith("_long")
        }

    def _count_score(self, method: str, score: float) -> None:
        if method not in self.histograms:
            if len(self.histograms) >= 10:
                return
            self.histograms[method] = Histogram(*HISTOGRAM_RANGES.get(method, DEFAULT_RANGE))
        self.histograms[method].add(score)

    def _latency(self, record: Mapping[str, Any], stage: str, is_outcome: bool) -> None:
        """A stage record's own timing; an outcome's timings summed: the whole ladder."""
        timings = record.get("timings")
        if not isinstance(timings, Mapping):
            return
        if is_outcome:
            spent = [x for v in timings.values() if (x := _number(v)) is not None]
            if spent:
                self.total_latency.append(sum(spent))
            return
        ms = _number(timings.get(stage))
        if ms is None:
            return
        window = self.latency.get(stage)
        if window is None:
            if len(self.latency) >= 20:
                return
            window = self.latency[stage] = deque(maxlen=LATENCY_WINDOW)
        window.append(ms)

    def _time(self, record: Mapping[str, Any], is_outcome: bool) -> None:
        at = _epoch(record.get("decided_at"))
        if at is None:
            return
        if self.last_decided_at is None or str(record["decided_at"]) > self.last_decided_at:
            self.last_decided_at = str(record["decided_at"])
        minute = int(at // 60)
        bucket = self.minutes.setdefault(minute, Minute())
        bucket.decisions += 1
        if is_outcome:
            bucket.outcomes.add(_label(record.get("topic")))
        if len(self.minutes) > self.max_minutes:
            newest = max(self.minutes)
            for m in [m for m in self.minutes if m <= newest - self.max_minutes]:
                del self.minutes[m]
        now = self.clock()
        if now - 60 < at <= now + 5:
            second = int(at)
            self.seconds[second] = self.seconds.get(second, 0) + 1
            self._prune_seconds(now)

    def _prune_seconds(self, now: float) -> None:
        for s in [s for s in self.seconds if s <= now - 60]:
            del self.seconds[s]

    def _trail(self, candidate_id: str, shown: Shown) -> None:
        cid = candidate_id[:512]
        trail = self.trails.get(cid)
        if trail is None:
            trail = self.trails[cid] = deque(maxlen=self.trail_length)
            if len(self.trails) > self.max_trails:
                self.trails.popitem(last=False)
        else:
            self.trails.move_to_end(cid)
        trail.append(shown)

    # -- live subscribers ---------------------------------------------------------

    def subscribe(self) -> asyncio.Queue[Shown | None]:
        queue: asyncio.Queue[Shown | None] = asyncio.Queue(self.subscriber_queue)
        self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Shown | None]) -> None:
        self.subscribers.discard(queue)

    def _publish(self, shown: Shown) -> None:
        for queue in self.subscribers:
            if queue.full():  # a slow client loses its oldest events, never stalls the feed
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                self.dropped_events += 1
            queue.put_nowait(shown)

    def close_subscribers(self) -> None:
        for queue in self.subscribers:
            if queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(None)

    # -- reading ------------------------------------------------------------------

    def decisions(
        self, limit: int, candidate_id: str | None = None, *, full: bool = False
    ) -> list[dict[str, Any]]:
        """Newest first by decision time (records of several partitions arrive
        interleaved; arrival order breaks ties, and a record without a time goes last);
        sanitized with `full`, else each record's public projection."""
        if candidate_id is not None:
            source: Any = self.trails.get(candidate_id, ())
        else:
            source = self.recent
        newest = [shown.to(full) for shown in reversed(source)]
        newest.sort(key=lambda r: _epoch(r.get("decided_at")) or 0.0, reverse=True)
        return newest[:limit]

    def summary(self) -> dict[str, Any]:
        now = self.clock()
        self._prune_seconds(now)
        outcomes = {t.value: 0 for t in TERMINAL} | self.outcomes.as_dict()
        histograms = {}
        for method, hist in sorted(self.histograms.items()):
            histograms[method] = hist.as_dict() | {"thresholds": self._cuts_of(method)}
        return {
            "records": self.records,
            "malformed": self.malformed,
            "duplicates": self.duplicates,
            "outcomes": outcomes,
            "candidates_finished": sum(outcomes.values()),
            "stages": {s: c.as_dict() for s, c in self.stage_actions.items()},
            "routes": {r: c.as_dict() for r, c in sorted(self.routes.items())},
            "gates": self.gates.as_dict(),
            "breakers": sorted(self.breakers.values(), key=lambda b: (b["endpoint"], b["route"])),
            "judge_budget": self._judge_spend(),
            "histograms": histograms,
            "per_minute": [
                {
                    "minute": iso_time(m * 60),
                    "decisions": b.decisions,
                    "outcomes": sum(b.outcomes.counts.values()),
                    "by_outcome": b.outcomes.as_dict(),
                }
                for m, b in sorted(self.minutes.items())
            ],
            "latency": {s: _spread(w) for s, w in sorted(self.latency.items())},
            "ladder_latency": _spread(self.total_latency),
            "rate_per_minute": sum(self.seconds.values()),
            "last_decided_at": self.last_decided_at,
            "kill_switch": {
                "on": self.control.kill_switch,
                "by": self.control.kill_switch_by,
                "at": self.control.kill_switch_at,
            },
        }


def _spread(window: deque[float]) -> dict[str, Any]:
    values = list(window)
    return {"p50": percentile(values, 50), "p95": percentile(values, 95), "count": len(values)}
