"""The web dashboard: live aggregates of `decisions`, the review queue, the kill switch.

A background feed follows `decisions` (and the control topic, for the kill-switch banner)
with a group-less consumer, from the beginning and then live, and folds every record into
one `DashboardState` owned by the app: bounded counters, the last N sanitized records,
score histograms and a per-minute rate. Everything the dashboard serves or keeps is a
sanitized record (`pipeline.records.sanitize`) or a review summary: never raw answer text.

Reading is open to whoever can reach the bind address (127.0.0.1 unless
GROUNDSTREAM_WEB_HOST says otherwise). Changing state (a review verdict, the kill switch)
needs `Authorization: Bearer <GROUNDSTREAM_WEB_TOKEN>`; with no token configured those
endpoints refuse (403), so the dashboard is never open for writes by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import math
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from pipeline.policy import Policy
from pipeline.records import OUTCOME_STAGE, iso_time, sanitize
from pipeline.review import HumanVerdict
from topics.codec import dumps, loads
from topics.names import Topic
from workers.control import apply_control
from workers.settings import Settings
from workers.stagekit import ControlState

log = logging.getLogger("groundstream.dashboard")

STATIC_DIR = Path(__file__).resolve().parent / "static"
OUTCOME_TOPICS: tuple[str, ...] = tuple(
    t.value
    for t in (
        Topic.STATE,
        Topic.FALLBACK,
        Topic.REGENERATE,
        Topic.REJECT,
        Topic.REVIEW,
        Topic.DEADLETTER,
    )
)
# Score ranges of the geometry histograms: (low, high, bins); values outside count as
# under/over (the SGI sentinel 10.0 lands in `over`).
HISTOGRAM_RANGES: dict[str, tuple[float, float, int]] = {
    "sgi": (0.0, 2.5, 25),
    "dgi": (-1.0, 1.0, 20),
}
DEFAULT_RANGE = (0.0, 1.0, 20)
MAX_KEYS = 200  # distinct values kept per counter; the rest count as "(other)"
MAX_NAME = 80  # stage, action, gate ... names longer than this are cut
MAX_BODY = 16 * 1024
REVIEW_CACHE_SECONDS = 2.0
REVIEW_TIMEOUT = 30.0


# ----------------------------------------------------------------------- state --


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


def _name(value: Any, default: str = "") -> str:
    """A record field as a short label (fields off the topic may hold anything)."""
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
        self.histograms: dict[str, Histogram] = {}
        self.thresholds: dict[str, float] = {}
        self.recent: deque[dict[str, Any]] = deque(maxlen=recent)
        self.trails: OrderedDict[str, deque[dict[str, Any]]] = OrderedDict()
        self.max_trails, self.trail_length = trails, trail_length
        self.minutes: dict[int, list[int]] = {}
        self.max_minutes = minutes
        self.seconds: dict[int, int] = {}
        self.last_decided_at: str | None = None
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._max_seen = seen_hashes
        self.subscribers: set[asyncio.Queue[dict[str, Any] | None]] = set()
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
        self.records += 1
        stage = _name(record.get("stage"), "?")
        action = _name(record.get("action"), "?")
        is_outcome = stage == OUTCOME_STAGE
        if "topic" in record:
            self.outcomes.add(_name(record.get("topic"), "?"))
        if is_outcome:
            route = self.routes.setdefault(_name(record.get("route"), "?"), BoundedCounter(20))
            route.add(_name(record.get("mode"), "?"))
        else:
            self.stage_actions.setdefault(stage, BoundedCounter(50)).add(action)
            if record.get("gate"):
                self.gates.add(_name(record.get("gate")))
        self._breakers(record)
        self._histogram(record, stage)
        self._time(record, is_outcome)
        self.recent.append(clean)
        self._trail(record["candidate_id"], clean)
        self._publish(clean)
        return clean

    def _breakers(self, record: Mapping[str, Any]) -> None:
        breaker = record.get("breaker")
        if not isinstance(breaker, Mapping):
            return
        for endpoint, status in breaker.items():
            key = f"{_name(endpoint)}@{_name(record.get('route'), '?')}"
            self.breakers[key] = {
                "endpoint": _name(endpoint),
                "route": _name(record.get("route"), "?"),
                "state": _name(status, "?"),
                "at": record.get("decided_at"),
            }
            self.breakers.move_to_end(key)
            if len(self.breakers) > MAX_KEYS:
                self.breakers.popitem(last=False)

    def _histogram(self, record: Mapping[str, Any], stage: str) -> None:
        score = _number(record.get("score"))
        if stage != "geometry" or score is None:
            return
        method = _name(record.get("method"), "?")
        if method not in self.histograms:
            if len(self.histograms) >= 10:
                return
            self.histograms[method] = Histogram(*HISTOGRAM_RANGES.get(method, DEFAULT_RANGE))
        self.histograms[method].add(score)
        thresholds = record.get("thresholds")
        if isinstance(thresholds, Mapping) and thresholds:  # the policy's, as last seen
            self.thresholds = {
                _name(k): x for k, v in thresholds.items() if (x := _number(v)) is not None
            }

    def _time(self, record: Mapping[str, Any], is_outcome: bool) -> None:
        at = _epoch(record.get("decided_at"))
        if at is None:
            return
        if self.last_decided_at is None or str(record["decided_at"]) > self.last_decided_at:
            self.last_decided_at = str(record["decided_at"])
        minute = int(at // 60)
        bucket = self.minutes.setdefault(minute, [0, 0])
        bucket[0] += 1
        bucket[1] += int(is_outcome)
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

    def _trail(self, candidate_id: str, clean: dict[str, Any]) -> None:
        cid = candidate_id[:512]
        trail = self.trails.get(cid)
        if trail is None:
            trail = self.trails[cid] = deque(maxlen=self.trail_length)
            if len(self.trails) > self.max_trails:
                self.trails.popitem(last=False)
        else:
            self.trails.move_to_end(cid)
        trail.append(clean)

    # -- live subscribers ---------------------------------------------------------

    def subscribe(self) -> asyncio.Queue[dict[str, Any] | None]:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(self.subscriber_queue)
        self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        self.subscribers.discard(queue)

    def _publish(self, clean: dict[str, Any]) -> None:
        for queue in self.subscribers:
            if queue.full():  # a slow client loses its oldest events, never stalls the feed
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
                self.dropped_events += 1
            queue.put_nowait(clean)

    def close_subscribers(self) -> None:
        for queue in self.subscribers:
            if queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(None)

    # -- reading ------------------------------------------------------------------

    def decisions(self, limit: int, candidate_id: str | None = None) -> list[dict[str, Any]]:
        """Newest first."""
        if candidate_id is not None:
            source: Any = self.trails.get(candidate_id, ())
        else:
            source = self.recent
        return list(reversed(source))[:limit]

    def summary(self) -> dict[str, Any]:
        now = self.clock()
        self._prune_seconds(now)
        outcomes = {t: 0 for t in OUTCOME_TOPICS} | self.outcomes.as_dict()
        histograms = {}
        for method, hist in sorted(self.histograms.items()):
            marks = {k: v for k, v in self.thresholds.items() if k.startswith(method + "_")}
            histograms[method] = hist.as_dict() | {"thresholds": marks}
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
            "histograms": histograms,
            "per_minute": [
                {"minute": iso_time(m * 60), "decisions": d, "outcomes": o}
                for m, (d, o) in sorted(self.minutes.items())
            ],
            "rate_per_minute": sum(self.seconds.values()),
            "last_decided_at": self.last_decided_at,
            "kill_switch": {
                "on": self.control.kill_switch,
                "by": self.control.kill_switch_by,
                "at": self.control.kill_switch_at,
            },
        }


# ------------------------------------------------------------------------ feed --


class Feed(Protocol):
    """What fills the state: `run` feeds it until cancelled."""

    async def run(self, state: DashboardState) -> None: ...

    def status(self) -> dict[str, Any]: ...


class KafkaFeed:
    """Follows `decisions` and `control` without a consumer group, from the beginning.

    A record at an offset already read is skipped, so a restarted consumer or a changed
    partition assignment (both read again from the beginning) never counts twice.
    """

    def __init__(self, settings: Settings, retry: float = 2.0) -> None:
        self.settings = settings
        self.retry = retry
        self.decisions = settings.topic(Topic.DECISIONS)
        self.control = settings.topic(Topic.CONTROL)
        self.connected = False
        self.last_error: str | None = None
        self._next: dict[tuple[str, int], int] = {}
        self._lag = 0

    def status(self) -> dict[str, Any]:
        return {
            "kind": "kafka",
            "topic": self.decisions,
            "connected": self.connected,
            "lag": self._lag,
            "last_error": self.last_error,
        }

    def _behind(self, consumer: Any) -> int:
        """Records of `decisions` not read yet, as of the last fetch."""
        lag = 0
        for tp in consumer.assignment():
            if tp.topic == self.decisions:
                end = consumer.highwater(tp) or 0
                lag += max(0, end - self._next.get((tp.topic, tp.partition), 0))
        return lag

    async def run(self, state: DashboardState) -> None:
        from workers.kafka_tools import reader

        while True:
            consumer = reader(
                self.settings, self.decisions, self.control, client_id="groundstream-dashboard"
            )
            try:
                await consumer.start()
                self.connected, self.last_error = True, None
                while True:
                    batches = await consumer.getmany(timeout_ms=500, max_records=2000)
                    for tp, records in batches.items():
                        key = (tp.topic, tp.partition)
                        for rec in records:
                            if rec.offset < self._next.get(key, 0):
                                continue
                            self._next[key] = rec.offset + 1
                            if tp.topic == self.control:
                                state.apply_control(rec.key, rec.value)
                            else:
                                state.ingest_bytes(rec.value)
                    self._lag = self._behind(consumer)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker may come and go: keep trying
                self.connected, self.last_error = False, type(exc).__name__
                log.warning("decisions feed restarting after %s", type(exc).__name__)
                await asyncio.sleep(self.retry)
            finally:
                self.connected = False
                with contextlib.suppress(Exception):
                    await consumer.stop()


# ---------------------------------------------------------------- operations --


class Operations(Protocol):
    """The state-changing and queue-reading calls, so tests can run without Kafka."""

    async def pending(self) -> list[dict[str, Any]]: ...

    async def decide(
        self, candidate_id: str, verdict: HumanVerdict, by: str, note: str
    ) -> dict[str, Any]: ...

    async def kill_switch(self, on: bool, by: str) -> dict[str, Any]: ...


class KafkaOperations:
    """`workers.review` and `workers.control` against the configured broker."""

    def __init__(self, settings: Settings, policy: Policy) -> None:
        self.settings, self.policy = settings, policy

    async def pending(self) -> list[dict[str, Any]]:
        from workers.review import pending

        items = await pending(self.settings, timeout=REVIEW_TIMEOUT / 2)
        return [item.summary() for item in items]

    async def decide(
        self, candidate_id: str, verdict: HumanVerdict, by: str, note: str
    ) -> dict[str, Any]:
        from workers.review import decide

        return await decide(self.settings, self.policy, candidate_id, verdict, by, note)

    async def kill_switch(self, on: bool, by: str) -> dict[str, Any]:
        from workers.control import publish_kill_switch

        topic = self.settings.topic(Topic.CONTROL)
        return await publish_kill_switch(self.settings.bootstrap_servers, topic, on, by)


# --------------------------------------------------------------------- web app --


@dataclass
class _ReviewCache:
    """`pending` reads two whole topics: share one read among requests close together."""

    items: list[dict[str, Any]] | None = None
    at: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


STATE = web.AppKey("groundstream_state", DashboardState)
FEED = web.AppKey("groundstream_feed", Feed)  # type: ignore[type-abstract]
OPS = web.AppKey("groundstream_ops", Operations)  # type: ignore[type-abstract]
SETTINGS = web.AppKey("groundstream_settings", Settings)
REVIEW_CACHE = web.AppKey("groundstream_review_cache", _ReviewCache)
FEED_TASK = web.AppKey("groundstream_feed_task", asyncio.Task)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(data), status=status, content_type="application/json")


def _error(status: int, message: str, **headers: str) -> web.Response:
    response = _json({"error": message}, status)
    response.headers.update(headers)
    return response


@web.middleware
async def _security_headers(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    response = await handler(request)
    response.headers.setdefault(
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'",
    )
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    response.headers.setdefault("X-Frame-Options", "DENY")
    if request.path.startswith("/api/"):
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def _authorize(request: web.Request) -> web.Response | None:
    """None when the request carries the configured token; else the refusal to send."""
    token = request.app[SETTINGS].web_token
    if not token:
        return _error(
            403,
            "GROUNDSTREAM_WEB_TOKEN is not set: review verdicts and the kill switch are "
            "disabled on this dashboard",
        )
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode("utf-8"), token.encode("utf-8")
    ):
        return _error(401, "missing or wrong bearer token", **{"WWW-Authenticate": "Bearer"})
    return None


async def _body(request: web.Request) -> dict[str, Any] | web.Response:
    if request.content_length is not None and request.content_length > MAX_BODY:
        return _error(413, f"body over {MAX_BODY} bytes")
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        return _error(413, f"body over {MAX_BODY} bytes")
    try:
        body = loads(raw)
    except ValueError:
        return _error(400, "body must be a JSON object")
    if not isinstance(body, dict):
        return _error(400, "body must be a JSON object")
    return body


def _person(body: Mapping[str, Any]) -> str | web.Response:
    by = body.get("by")
    if not isinstance(by, str) or not by.strip():
        return _error(400, '"by" must name the person deciding (a non-empty string)')
    if len(by) > 100:
        return _error(400, '"by" is longer than 100 characters')
    return by.strip()


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    feed = request.app[FEED]
    task = request.app.get(FEED_TASK)
    running = task is not None and not task.done()
    return _json(
        {
            "status": "ok" if running else "stopped",
            "feed": {**feed.status(), "running": running},
            "records": state.records,
            "subscribers": len(state.subscribers),
            "kill_switch": state.control.kill_switch,
            "writes_enabled": bool(request.app[SETTINGS].web_token),
        }
    )


async def summary(request: web.Request) -> web.Response:
    return _json(request.app[STATE].summary())


async def decisions(request: web.Request) -> web.Response:
    state = request.app[STATE]
    raw = request.query.get("limit", "100")
    try:
        limit = int(raw)
    except ValueError:
        return _error(400, f"limit must be an integer, got {raw[:40]!r}")
    if not 1 <= limit <= state.recent.maxlen:  # type: ignore[operator]
        return _error(400, f"limit must be between 1 and {state.recent.maxlen}")
    candidate_id = request.query.get("candidate_id") or None
    items = state.decisions(limit, candidate_id)
    return _json({"decisions": items, "count": len(items), "records": state.records})


async def events(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    queue = state.subscribe()
    try:
        await response.write(b"retry: 3000\n: connected\n\n")
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=15.0)
            except TimeoutError:
                await response.write(b": ping\n\n")
                continue
            if item is None:
                break
            await response.write(b"event: decision\ndata: " + dumps(item) + b"\n\n")
    except ConnectionResetError:
        pass  # the client went away
    finally:
        state.unsubscribe(queue)
    return response


async def review_list(request: web.Request) -> web.Response:
    cache = request.app[REVIEW_CACHE]
    async with cache.lock:
        if cache.items is None or time.monotonic() - cache.at > REVIEW_CACHE_SECONDS:
            try:
                items = await asyncio.wait_for(request.app[OPS].pending(), REVIEW_TIMEOUT)
            except Exception as exc:
                log.warning("review queue unavailable: %s", type(exc).__name__)
                return _error(503, f"review queue unavailable ({type(exc).__name__})")
            cache.items, cache.at = items, time.monotonic()
    return _json({"pending": cache.items, "count": len(cache.items)})


async def review_decide(request: web.Request) -> web.Response:
    if (refusal := _authorize(request)) is not None:
        return refusal
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    candidate_id = request.match_info["candidate_id"]
    if len(candidate_id) > 512:
        return _error(400, "candidate id is longer than 512 characters")
    verdict = body.get("verdict")
    if verdict not in ("accept", "reject"):
        return _error(400, '"verdict" must be "accept" or "reject"')
    by = _person(body)
    if isinstance(by, web.Response):
        return by
    note = body.get("note", "")
    if not isinstance(note, str) or len(note) > 2000:
        return _error(400, '"note" must be a string of at most 2000 characters')
    try:
        record = await asyncio.wait_for(
            request.app[OPS].decide(candidate_id, HumanVerdict(verdict), by, note),
            2 * REVIEW_TIMEOUT,
        )
    except LookupError as exc:
        return _error(404, str(exc))
    except ValueError as exc:
        return _error(400, str(exc))
    except Exception as exc:
        log.warning("review verdict for %s failed: %s", candidate_id, type(exc).__name__)
        return _error(503, f"could not record the verdict ({type(exc).__name__})")
    request.app[REVIEW_CACHE].items = None
    log.info("review: %s %s by %s", candidate_id, verdict, by)
    return _json({"ok": True, "decision": sanitize(record)})


async def kill_switch(request: web.Request) -> web.Response:
    if (refusal := _authorize(request)) is not None:
        return refusal
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    on = body.get("on")
    if not isinstance(on, bool):
        return _error(400, '"on" must be true or false')
    by = _person(body)
    if isinstance(by, web.Response):
        return by
    try:
        message = await asyncio.wait_for(request.app[OPS].kill_switch(on, by), REVIEW_TIMEOUT)
    except Exception as exc:
        log.warning("kill switch not published: %s", type(exc).__name__)
        return _error(503, f"could not publish the kill switch ({type(exc).__name__})")
    control = request.app[STATE].control  # the feed confirms it from the topic shortly
    control.kill_switch, control.kill_switch_by = on, by
    control.kill_switch_at = float(message.get("at", time.time()))
    log.warning("kill switch %s by %s (dashboard)", "ON" if on else "off", by)
    return _json({"ok": True, "kill_switch": message})


async def _run_feed(app: web.Application) -> AsyncIterator[None]:
    state, feed = app[STATE], app[FEED]

    async def guarded() -> None:
        try:
            await feed.run(state)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("decisions feed stopped")
            raise

    app[FEED_TASK] = asyncio.create_task(guarded(), name="groundstream-dashboard-feed")
    yield
    app[FEED_TASK].cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await app[FEED_TASK]


async def _close_streams(app: web.Application) -> None:
    app[STATE].close_subscribers()


def build_app(
    settings: Settings,
    policy: Policy,
    *,
    feed: Feed | None = None,
    ops: Operations | None = None,
    state: DashboardState | None = None,
) -> web.Application:
    """The dashboard app; `feed` and `ops` default to the configured Kafka cluster."""
    app = web.Application(middlewares=[_security_headers], client_max_size=MAX_BODY)
    app[SETTINGS] = settings
    app[STATE] = state if state is not None else DashboardState()
    app[FEED] = feed if feed is not None else KafkaFeed(settings)
    app[OPS] = ops if ops is not None else KafkaOperations(settings, policy)
    app[REVIEW_CACHE] = _ReviewCache()
    app.cleanup_ctx.append(_run_feed)
    app.on_shutdown.append(_close_streams)
    app.router.add_get("/", index)
    app.router.add_get("/api/health", health)
    app.router.add_get("/api/summary", summary)
    app.router.add_get("/api/decisions", decisions)
    app.router.add_get("/api/events", events)
    app.router.add_get("/api/review", review_list)
    app.router.add_post("/api/review/{candidate_id}", review_decide)
    app.router.add_post("/api/kill-switch", kill_switch)
    app.router.add_static("/static/", STATIC_DIR, follow_symlinks=False)
    return app


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_dashboard(settings: Settings) -> None:
    """Serve the dashboard on settings.web_host:web_port until SIGINT or SIGTERM."""
    policy = settings.load_policy()
    if not settings.web_token:
        log.warning(
            "GROUNDSTREAM_WEB_TOKEN is not set: the dashboard is read-only "
            "(review verdicts and the kill switch answer 403)"
        )
    if not _is_loopback(settings.web_host):
        log.warning(
            "dashboard listens on %s, beyond this machine: anyone who can reach it can read "
            "the sanitized decisions",
            settings.web_host,
        )
    log.warning("dashboard on http://%s:%d/", settings.web_host, settings.web_port)
    web.run_app(
        build_app(settings, policy),
        host=settings.web_host,
        port=settings.web_port,
        shutdown_timeout=5.0,
        print=None,
        handle_signals=True,
    )
