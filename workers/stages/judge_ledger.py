"""The judge's table: each input partition's spend of the judge budgets and its verdict
cache, kept in the compacted `judge.ledger` changelog and written in the batch's
transaction (`workers.runtime.store`), so state lives on the broker.

Every entry belongs to one partition of the judge's input topic, and is written to that
partition of the changelog (`placement`), not where its key would hash:

    b"<p>|b|" + JSON [route, tenant or null]   the spend of a budget on partition p
    b"<p>|v|" + cache key                      a clear verdict asked on partition p

So the worker that owns input partition p — the only one deciding p's candidates — reads
and writes p's entries alone, and whoever owns p next (after a rebalance, a crash or a
restart) restores exactly what p's committed batches wrote. The budget's shares sum to
the budget (`pipeline.judge.budget.partition_share`), so no coordination is needed for the
sum over all workers to hold. The cache is per partition too: a resubmission hits when it
lands on the partition of the first ask — always for the same session (the input is keyed
by session id), and for another session only when it hashes to the same partition. A
global table read by every worker would hit across sessions, but every worker would then
tail and hold all of it; per partition, the cache answers the same whatever the group's
assignment, and costs one partition's entries per partition held.

The embedded runner and tests hand it a dict: one partition, the same rules.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pipeline.encoding.tokens import estimate_request_tokens
from pipeline.judge.budget import (
    CALL_WINDOW_S,
    GUARD_S,
    MAX_WAIT_S,
    Account,
    Admission,
    Spend,
    admit,
    figures,
    limits_for,
    over_budget_verdict,
    tenant_of,
)
from pipeline.judge.question import JudgeReadout, build_judge_messages
from pipeline.judge.verdict_cache import (
    SWEEP_EVERY_S,
    CachedVerdict,
    cache_key,
    cacheable,
    evictions,
    readout_from_dict,
)
from pipeline.policy.document import Policy
from pipeline.policy.routing import RouteConfig
from pipeline.trail.records import iso_time
from pipeline.trail.verdict import Verdict
from topics.schema import Envelope
from workers.clients.endpoints import rate_limit_patience, time_left
from workers.clients.llm import CallResult, spent_tokens
from workers.interfaces import StageContext

BUDGET = b"b"
VERDICT = b"v"


def placement(key: bytes) -> int | None:
    """The changelog partition of a judge-table key: the input partition it names."""
    head, sep, _ = key.partition(b"|")
    return int(head) if sep and head.isdigit() else None


def budget_key(partition: int, route: str, tenant: str | None) -> bytes:
    return b"%d|%s|%s" % (partition, BUDGET, json.dumps([route, tenant]).encode("utf-8"))


def verdict_key(partition: int, key: str) -> bytes:
    return b"%d|%s|%s" % (partition, VERDICT, key.encode("ascii"))


def _parts(key: bytes) -> tuple[int, bytes, bytes] | None:
    head, kind, rest = [*key.split(b"|", 2), b"", b""][:3]
    return (int(head), kind, rest) if head.isdigit() else None


@dataclass(frozen=True, slots=True)
class Booking:
    """An admitted call: what was reserved where, to settle once the reply is in."""

    admission: Admission
    accounts: tuple[tuple[Account, bytes], ...]
    """Each account drawn on (as it was before the reservation), with its table key."""
    calls: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Call:
    """A judge call the gate would make, as a `Book` admits it against the budgets: the
    route and tenant whose accounts it draws on, this input partition of `partitions`,
    when (`now`), the candidate's deadline, and the requests and tokens it would spend."""

    route: RouteConfig
    tenant: str | None
    partition: int
    partitions: int
    now: float
    deadline: float | None
    calls: int
    tokens: int


@dataclass
class JudgeBook:
    """The judge stage's reads and writes of its table (see the module docstring)."""

    table: MutableMapping[bytes, Any]
    window: float = CALL_WINDOW_S + GUARD_S
    max_wait: float = MAX_WAIT_S

    # -- the verdict cache ------------------------------------------------------------

    def lookup(self, partition: int, key: str, now: float, ttl: float) -> CachedVerdict | None:
        """A fresh clear verdict on this partition for `key`, else None."""
        if ttl <= 0:
            return None
        entry = CachedVerdict.from_dict(self.table.get(verdict_key(partition, key)))
        return entry if entry is not None and entry.fresh(now, ttl) else None

    def remember(
        self, partition: int, key: str, readout: JudgeReadout, now: float, candidate_id: str
    ) -> None:
        kept = {k: v for k, v in readout.to_dict().items() if k != "votes"}  # the verdict only
        entry = CachedVerdict(kept, now, candidate_id)
        self.table[verdict_key(partition, key)] = entry.to_dict()

    # -- the budgets ------------------------------------------------------------------

    def accounts(
        self, route: RouteConfig, tenant: str | None, partition: int, partitions: int, now: float
    ) -> tuple[tuple[Account, bytes], ...]:
        """Each budget the route's answers on `partition` draw on, with its table key."""
        mine, theirs = limits_for(route.judge_budget, route.name, tenant, partition, partitions)
        out = []
        for scope, name, limit, who in (
            ("route", route.name, mine, None),
            ("tenant", tenant, theirs, tenant),
        ):
            if limit is None or (limit.calls is None and limit.tokens is None):
                continue
            key = budget_key(partition, route.name, who)
            spend = Spend.from_dict(self.table.get(key)).pruned(now, self.window)
            out.append((Account(scope, str(name), spend, limit), key))
        return tuple(out)

    def admit(self, call: Call) -> tuple[Admission, Booking | None, dict[str, Any]]:
        """Admit a call (`pipeline.judge.budget.admit`) and, when admitted, reserve it in
        every account; with the booking to settle and the figures for the record."""
        now, calls, tokens = call.now, call.calls, call.tokens
        found = self.accounts(call.route, call.tenant, call.partition, call.partitions, now)
        if not found:
            return Admission(True, now), None, {}
        accounts = tuple(a for a, _ in found)
        budget = call.route.judge_budget
        admission = admit(
            accounts,
            now,
            call.deadline,
            calls,
            tokens,
            budget.over_budget,
            window=self.window,
            max_wait=self.max_wait,
        )
        if not admission.admitted:
            return admission, None, figures(accounts, now, self.window)
        for account, key in found:
            self.table[key] = account.spend.reserved(admission.at, calls, tokens).to_dict()
        booking = Booking(admission, found, calls, tokens)
        return admission, booking, {}

    def settle(self, booking: Booking, calls: int, tokens: int, now: float) -> dict[str, Any]:
        """Replace the reservation by what was spent: `calls` requests sent, `tokens`
        counted; the figures after, for the record."""
        at = booking.admission.at
        after = []
        for account, key in booking.accounts:
            spend = Spend.from_dict(self.table.get(key))  # others of the batch wrote too
            spend = spend.reserved(at, calls - booking.calls, tokens - booking.tokens)
            self.table[key] = spend.to_dict()
            after.append(replace(account, spend=spend))
        return figures(after, now, self.window)

    # -- housekeeping -----------------------------------------------------------------

    def sweep(self, now: float, ttl: float) -> int:
        """Delete expired verdicts (and the oldest past the cap) and spent-out budgets;
        how many entries went."""
        verdicts: dict[int, list[tuple[bytes, float]]] = {}
        gone: list[bytes] = []
        for key, value in self._items():
            parts = _parts(key)
            if parts is None:
                continue
            partition, kind, _ = parts
            if kind == VERDICT:
                entry = CachedVerdict.from_dict(value)
                verdicts.setdefault(partition, []).append(
                    (key, -1e18 if entry is None else entry.at)
                )
            elif kind == BUDGET and Spend.from_dict(value).pruned(now, self.window).empty:
                gone.append(key)
        for entries in verdicts.values():
            gone += evictions(entries, now, ttl)
        for key in gone:
            self.table.pop(key, None)
        return len(gone)

    def _items(self) -> Iterator[tuple[bytes, Any]]:
        for key in list(self.table):
            try:
                yield key, self.table[key]
            except KeyError:  # deleted meanwhile (a metrics scrape reads from its thread)
                continue

    def left(
        self, policy: Policy, partitions: int, held: frozenset[int], now: float
    ) -> list[tuple[str, str, str, int, int]]:
        """(route, tenant, budget, left, share) summed over the partitions `held`, for the
        metrics: the route's own budgets on every held partition, a tenant's where it spent."""
        totals: dict[tuple[str, str, str], list[int]] = {}

        def add(route: str, tenant: str, account: Account) -> None:
            for budget, share, used in (
                ("calls", account.limit.calls, account.spend.calls_at(now, self.window)),
                ("tokens", account.limit.tokens, account.spend.tokens_at(now)),
            ):
                if share is None:
                    continue
                total = totals.setdefault((route, tenant, budget), [0, 0])
                total[0] += max(0, share - used)
                total[1] += share

        seen: set[tuple[int, str, str | None]] = set()
        for key, _ in self._items():
            parts = _parts(key)
            if parts is None or parts[1] != BUDGET or parts[0] not in held:
                continue
            try:
                route, tenant = json.loads(parts[2])
            except (TypeError, ValueError):  # not a key this module wrote
                continue
            seen.add((parts[0], str(route), tenant))
        for name, route in policy.routes.items():
            if route.judge_budget.limited:
                for p in held:
                    seen.add((p, name, None))
        for p, name, tenant in sorted(seen, key=lambda s: (s[0], s[1], s[2] or "")):
            route = policy.routes.get(name)
            if route is None or p >= partitions:
                continue
            for account, _ in self.accounts(route, tenant, p, partitions, now):
                if (account.scope == "tenant") == (tenant is not None):
                    add(name, tenant or "", account)
        return [(r, t, b, v[0], v[1]) for (r, t, b), v in sorted(totals.items())]


# ---------------------------------------------------------------------------------------
# The gate before the judge


@dataclass(frozen=True, slots=True)
class Asked:
    """What asking the judge came to: a readout and the calls that got it (none on a
    cache hit), the record's `cache`/`budget`/`tenant` evidence, and — when a budget kept
    the answer from the judge — the verdict it gets instead (never an accept)."""

    readout: JudgeReadout | None
    calls: tuple[CallResult, ...]
    evidence: dict[str, Any]
    over: Verdict | None = None


class Book(Protocol):
    """What the gate reads and writes: the judge's table (`JudgeBook`), or in a replay the
    recording (`workers.runtime.replay`)."""

    def lookup(self, partition: int, key: str, now: float, ttl: float) -> CachedVerdict | None: ...

    def remember(
        self, partition: int, key: str, readout: JudgeReadout, now: float, candidate_id: str
    ) -> None: ...

    def admit(self, call: Call) -> tuple[Admission, Booking | None, dict[str, Any]]: ...

    def settle(self, booking: Booking, calls: int, tokens: int, now: float) -> dict[str, Any]: ...


@dataclass
class JudgeGate:
    """The verdict cache and the budgets in front of the judge endpoint, for one stage."""

    window: float = CALL_WINDOW_S
    """The calls budget's window: a minute (a test may shorten it; the guard stays)."""
    guard: float = GUARD_S
    max_wait: float = MAX_WAIT_S
    recorded: Book | None = None
    """Set by a replay: answers come from the recording, not the table."""
    calls_per_verdict: dict[str, int] = field(default_factory=dict)
    """Requests one verdict took on each route (two where the server refuses the thinking
    switch and the client retries): what an admission reserves."""
    swept_at: float = -math.inf

    def book(self, table: MutableMapping[bytes, Any]) -> Book:
        return self.recorded or JudgeBook(table, self.window + self.guard, self.max_wait)

    def sweep(self, table: MutableMapping[bytes, Any], policy: Policy, now: float) -> None:
        """Once every `SWEEP_EVERY_S`, drop expired verdicts and spent-out budgets (their
        tombstones go in the batch's transaction)."""
        if self.recorded is not None or now - self.swept_at < SWEEP_EVERY_S:
            return
        self.swept_at = now
        ttl = max((r.judge_cache_ttl_seconds for r in policy.routes.values()), default=0.0)
        JudgeBook(table, self.window + self.guard, self.max_wait).sweep(now, ttl)

    async def ask(
        self,
        table: MutableMapping[bytes, Any],
        endpoint: Any,
        model: str,
        env: Envelope,
        route: RouteConfig,
        ctx: StageContext,
        partition: int,
        chunks: Sequence[str] | None,
        cap: float,
    ) -> Asked:
        """Answer from the cache, or admit a call against the budgets (waiting for a slot
        under `wait`), call, charge what was spent and remember a clear verdict."""
        c, config, book = env.candidate, ctx.policy.judge, self.book(table)
        ttl = route.judge_cache_ttl_seconds
        key = cache_key(c.question, chunks, c.response, model, config.top_logprobs)
        now = ctx.clock()
        hit = book.lookup(partition, key, now, ttl)
        if hit is not None:
            cached = {"cache": "hit", "cached_at": iso_time(hit.at), "cached_for": hit.candidate_id}
            return Asked(readout_from_dict(hit.readout), (), cached)
        tenant = tenant_of(c, route.judge_budget.tenant_field)
        evidence: dict[str, Any] = {"cache": "miss" if ttl > 0 else "off"}
        if tenant is not None:
            evidence["tenant"] = tenant
        need = self.calls_per_verdict.get(route.name, 1)
        estimate = need * (
            estimate_request_tokens(
                {"messages": build_judge_messages(c.question, chunks, c.response)}
            )
            + 1
        )
        partitions = max(ctx.source_partitions, partition + 1)
        admission, booking, figures_now = book.admit(
            Call(route, tenant, partition, partitions, now, env.deadline, need, estimate)
        )
        where = {"partition": partition, "partitions": partitions}
        if not admission.admitted:
            evidence["budget"] = {"state": "over", **where, **figures_now}
            over = over_budget_verdict(admission, route.judge_budget.over_budget)
            return Asked(None, (), evidence, over)
        if admission.at > now:
            await asyncio.sleep(admission.at - now)
        timeout = time_left(env.deadline, ctx.clock(), cap)
        patience = rate_limit_patience(env.deadline, ctx.clock(), cap)
        readout, calls = await endpoint.judge(
            c.question, chunks, c.response, config, timeout=timeout, patience=patience
        )
        sent = sum(1 for call in calls if call.tokens is not None)
        self.calls_per_verdict[route.name] = max(need, sent)
        if booking is not None:
            spent = spent_tokens(calls).total
            after = book.settle(booking, sent, spent, ctx.clock())
            waited = round(admission.waited(now), 3)
            state = {"state": "waited", "waited_s": waited} if waited else {"state": "ok"}
            evidence["budget"] = {**state, **where, **after}
        if ttl > 0 and readout is not None and cacheable(readout, config):
            book.remember(partition, key, readout, ctx.clock(), c.id)
        return Asked(readout, tuple(calls), evidence)


__all__ = ["Asked", "Book", "Booking", "Call", "JudgeBook", "JudgeGate", "placement"]
