"""The web dashboard: live aggregates of `decisions`, the review queue, the kill switch.

A background feed follows `decisions` (and the control topic, for the kill-switch banner)
with a group-less consumer, from the beginning and then live, and folds every record into
one `DashboardState` owned by the app: bounded counters, the last N records, score
histograms and a per-minute rate.

Who may see and do what is `workers.web.access`. Without a credential a request gets the
aggregates, each record's public projection (`pipeline.trail.disclosure.public_record`, an
allow-list: no answer text, no free-text reason) and the review queue's ids and times; with
one, the sanitized records and the review items' raw texts. A verdict needs a reviewer's
own credential (their token, or the authenticating proxy's identity header) and is recorded
under that name; the kill switch needs any credential. With none configured, every write
is refused (403), so the dashboard is never open for writes by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from yarl import URL

from pipeline.policy.document import Policy
from pipeline.stages.review import HumanVerdict
from pipeline.trail.records import sanitize
from topics.codec import DecodeLimitError, dumps, loads
from workers.runtime.review import AlreadyDecided
from workers.runtime.settings import Settings
from workers.web.access import Access, Gate, Refused
from workers.web.feed import (
    REVIEW_TIMEOUT,
    Feed,
    KafkaFeed,
    KafkaOperations,
    Operations,
)
from workers.web.state import DashboardState

log = logging.getLogger("groundstream.dashboard")

STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_BODY = 16 * 1024
MAX_SUBSCRIBERS = 32
"""Live event streams served at once; one more is refused (503) rather than let a page
left open in many tabs, or a client that never reads, hold the dashboard's memory."""
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ACCESS_RECHECK_S = 5.0
"""How often an open event stream that serves whole records checks its credential again."""
PING = object()
"""The event stream's keep-alive, sent after 15 s without a record."""
REVIEW_CACHE_SECONDS = 2.0

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
ALLOWED_HOSTS = web.AppKey("groundstream_allowed_hosts", frozenset)
GATE = web.AppKey("groundstream_gate", Gate)
PUBLIC_REVIEW_FIELDS = ("candidate_id", "session_id", "turn", "stage", "route", "gate", "queued_at")
"""What a review item shows without a credential: ids and times. The reason is free text
that may quote the answer, and who claimed it is a person: both need a credential."""


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(data), status=status, content_type="application/json")


def _error(status: int, message: str, **headers: str) -> web.Response:
    response = _json({"error": message}, status)
    response.headers.update(headers)
    return response


def allowed_hosts(settings: Settings) -> frozenset[str]:
    """Host names the dashboard answers to: loopback, the bind address unless it is a
    wildcard, and GROUNDSTREAM_WEB_ALLOWED_HOSTS (the names a proxy or users reach it by)."""
    extra = {h.strip().lower() for h in settings.web_allowed_hosts.split(",") if h.strip()}
    bound = set() if settings.web_host in ("0.0.0.0", "::", "") else {settings.web_host.lower()}
    return frozenset(LOOPBACK_NAMES | bound | extra)


@web.middleware
async def _host_check(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """DNS rebinding: a page on evil.example that re-points its name at 127.0.0.1 reaches
    this server with `Host: evil.example`; only the names the dashboard is known by pass."""
    host = request.headers.get("Host", "")
    try:
        name = (URL(f"http://{host}").host or "").lower() if host else ""
    except ValueError:
        name = ""
    if name.strip("[]") not in request.app[ALLOWED_HOSTS]:
        return _error(421, "unknown Host: set GROUNDSTREAM_WEB_ALLOWED_HOSTS to serve it")
    return await handler(request)


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


def _refusal(refused: Refused) -> web.Response:
    headers = {"WWW-Authenticate": "Bearer"} if refused.challenge else {}
    return _error(refused.status, refused.message, **headers)


def _access(request: web.Request) -> Access | web.Response:
    """The request's access (public without a credential), or the refusal of a wrong one."""
    try:
        return request.app[GATE].who(request.headers)
    except Refused as refused:
        return _refusal(refused)


async def _body(request: web.Request) -> dict[str, Any] | web.Response:
    if request.content_length is not None and request.content_length > MAX_BODY:
        return _error(413, f"body over {MAX_BODY} bytes")
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        return _error(413, f"body over {MAX_BODY} bytes")
    try:
        body = loads(raw)
    except DecodeLimitError as exc:
        return _error(400, f"body refused: {exc.reason}")
    except ValueError:
        return _error(400, "body must be a JSON object")
    if not isinstance(body, dict):
        return _error(400, "body must be a JSON object")
    return body


def _person(body: Mapping[str, Any]) -> str | web.Response:
    """The typed name of whoever flips the kill switch with the shared dashboard token
    (which names nobody); a reviewer's credential names them instead."""
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
            "writes_enabled": request.app[GATE].configured,
            "verdicts_enabled": request.app[GATE].reviewers_configured,
        }
    )


async def me(request: web.Request) -> web.Response:
    """What this request's credential is: the page shows the reviewer it signs verdicts as
    (behind a proxy, without any sign-in of its own)."""
    access = _access(request)
    if isinstance(access, web.Response):
        return access
    return _json({"reviewer": access.reviewer, "full": access.full, "via": access.via})


async def summary(request: web.Request) -> web.Response:
    return _json(request.app[STATE].summary())


async def decisions(request: web.Request) -> web.Response:
    """The last records, newest first: sanitized with a credential, else public."""
    access = _access(request)
    if isinstance(access, web.Response):
        return access
    state = request.app[STATE]
    raw = request.query.get("limit", "100")
    try:
        limit = int(raw)
    except ValueError:
        return _error(400, f"limit must be an integer, got {raw[:40]!r}")
    if not 1 <= limit <= state.recent.maxlen:  # type: ignore[operator]
        return _error(400, f"limit must be between 1 and {state.recent.maxlen}")
    candidate_id = request.query.get("candidate_id") or None
    items = state.decisions(limit, candidate_id, full=access.full)
    return _json(
        {"decisions": items, "count": len(items), "records": state.records, "full": access.full}
    )


async def events(request: web.Request) -> web.StreamResponse:
    """New records as server-sent events: sanitized with a credential, else public."""
    access = _access(request)
    if isinstance(access, web.Response):
        return access
    state = request.app[STATE]
    if len(state.subscribers) >= MAX_SUBSCRIBERS:
        return _error(503, f"{MAX_SUBSCRIBERS} live streams already open", **{"Retry-After": "10"})
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    queue = state.subscribe()
    checked = time.monotonic()
    try:
        await response.write(b"retry: 3000\n: connected\n\n")
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=15.0)
            except TimeoutError:
                item = PING
            if item is None:
                break
            if access.full and time.monotonic() - checked >= ACCESS_RECHECK_S:
                # A stream outlives the request that opened it: within ACCESS_RECHECK_S
                # of a reviewer's removal from the tokens file it ends here, before its
                # next record, and the page's reconnect is refused (401).
                checked = time.monotonic()
                if isinstance(_access(request), web.Response):
                    break
            if item is PING:
                await response.write(b": ping\n\n")
                continue
            data = dumps(item.to(access.full))
            await response.write(b"event: decision\ndata: " + data + b"\n\n")
    except ConnectionResetError:
        pass  # the client went away
    finally:
        state.unsubscribe(queue)
    return response


async def review_list(request: web.Request) -> web.Response:
    """What waits for review: with a credential, each item whole with its raw texts;
    without, its ids and times only (`PUBLIC_REVIEW_FIELDS`).

    A request that offers a token must offer the right one (401 otherwise), so a reviewer's
    page learns that its token is wrong rather than silently showing no texts.
    """
    access = _access(request)
    if isinstance(access, web.Response):
        return access
    with_texts = access.full
    cache = request.app[REVIEW_CACHE]
    async with cache.lock:
        if cache.items is None or time.monotonic() - cache.at > REVIEW_CACHE_SECONDS:
            try:
                items = await asyncio.wait_for(request.app[OPS].pending(), REVIEW_TIMEOUT)
            except Exception as exc:
                log.warning("review queue unavailable: %s", type(exc).__name__)
                return _error(503, f"review queue unavailable ({type(exc).__name__})")
            cache.items, cache.at = items, time.monotonic()
    pending = [
        item if with_texts else {k: item.get(k) for k in PUBLIC_REVIEW_FIELDS}
        for item in cache.items
    ]
    return _json({"pending": pending, "count": len(pending), "texts": with_texts})


async def review_decide(request: web.Request) -> web.Response:
    """A reviewer's verdict, recorded under the name their credential proves; a `by` in
    the body is ignored (the page no longer sends one)."""
    try:
        by = request.app[GATE].reviewer(request.headers)
    except Refused as refused:
        return _refusal(refused)
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    candidate_id = request.match_info["candidate_id"]
    if len(candidate_id) > 512:
        return _error(400, "candidate id is longer than 512 characters")
    verdict = body.get("verdict")
    if verdict not in ("accept", "reject"):
        return _error(400, '"verdict" must be "accept" or "reject"')
    note = body.get("note", "")
    if not isinstance(note, str) or len(note) > 2000:
        return _error(400, '"note" must be a string of at most 2000 characters')
    try:
        record = await asyncio.wait_for(
            request.app[OPS].decide(candidate_id, HumanVerdict(verdict), by, note),
            2 * REVIEW_TIMEOUT,
        )
    except AlreadyDecided as exc:  # another verdict on this item came first
        return _error(409, str(exc))
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
    """Any credential may stop automatic acceptance; a reviewer's is recorded by name, the
    shared dashboard token's by the `by` its holder types."""
    try:
        access = request.app[GATE].writer(request.headers)
    except Refused as refused:
        return _refusal(refused)
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    on = body.get("on")
    if not isinstance(on, bool):
        return _error(400, '"on" must be true or false')
    by = access.reviewer or _person(body)
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
    app = web.Application(middlewares=[_host_check, _security_headers], client_max_size=MAX_BODY)
    app[SETTINGS] = settings
    app[ALLOWED_HOSTS] = allowed_hosts(settings)
    app[GATE] = Gate(settings)
    app[STATE] = state if state is not None else DashboardState()
    app[FEED] = feed if feed is not None else KafkaFeed(settings)
    app[OPS] = ops if ops is not None else KafkaOperations(settings, policy)
    app[REVIEW_CACHE] = _ReviewCache()
    app.cleanup_ctx.append(_run_feed)
    app.on_shutdown.append(_close_streams)
    app.router.add_get("/", index)
    app.router.add_get("/api/health", health)
    app.router.add_get("/api/me", me)
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
    app = build_app(settings, policy)  # a bad tokens file stops it here, in one line
    gate = app[GATE]
    if not gate.configured:
        log.warning("no credential is configured: the dashboard is read-only (writes answer 403)")
    elif not gate.reviewers_configured:
        log.warning(
            "no reviewer credentials (GROUNDSTREAM_REVIEWER_TOKENS_FILE or "
            "GROUNDSTREAM_REVIEWER_IDENTITY_HEADER): review verdicts answer 403"
        )
    if settings.reviewer_identity_header:
        log.warning(
            "trusting the %s header as the reviewer's identity: serve this dashboard only "
            "through the authenticating proxy that sets it",
            settings.reviewer_identity_header,
        )
    if not _is_loopback(settings.web_host):
        log.warning(
            "dashboard listens on %s, beyond this machine: anyone who can reach it can read "
            "the aggregates and the public projection of the decisions",
            settings.web_host,
        )
    log.warning("dashboard on http://%s:%d/", settings.web_host, settings.web_port)
    web.run_app(
        app,
        host=settings.web_host,
        port=settings.web_port,
        shutdown_timeout=5.0,
        print=None,
        handle_signals=True,
    )
