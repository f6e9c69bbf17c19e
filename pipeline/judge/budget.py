"""Judge budgets: how many calls and tokens a route, and each tenant on it, may spend on
the judge, and what an answer that would go to the judge gets once that is spent.

Where it sits: the judge stage asks `admit` before it calls the endpoint (after the
verdict cache, `pipeline.judge.verdict_cache`, had no answer: a cached verdict costs nothing),
reserves the call in the partition's `Spend` (its tokens estimated from the request) and,
once the reply is in, charges the calls actually sent and the tokens the reply's `usage`
reports (or `pipeline.encoding.tokens`' estimate, which the record names as one).

How a budget holds across every judge worker without coordination: each partition of the
judge's input topic owns a fixed share of it (`partition_share`: budget // partitions,
the remainder one each to partitions picked by a hash of the route and tenant, so the
shares sum to the budget exactly). A partition is read by one worker at a time, and its
spend lives in the judge's changelog table, written in the same transaction as the batch's
outputs: whoever owns the partition next — after a rebalance or a restart — resumes from
its committed spend. The sum over all workers therefore never exceeds the budget. The
price: a partition cannot borrow an idle partition's share (skewed traffic under-uses the
budget), and a budget smaller than the partition count leaves some partitions none.

Windows: calls per minute over a sliding window of `CALL_WINDOW_S` plus `GUARD_S` (a log
of call times; the guard covers the time a request takes to reach the endpoint, so the
endpoint never sees more than the budget in any 60 s); tokens per day over 24 h of
per-minute buckets, a bucket counting until all of it is 24 h old.

Failure posture: over budget is never accepted. `over_budget` chooses `review` (a person
decides), `fallback`, `reject`, or `wait`: hold the answer until the window frees, at most
`MAX_WAIT_S` (well inside the consumer's poll interval) and never past its deadline; when
it would free later than that, the route's fallback. Pure: time comes in as `now`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

from pipeline.errors import PolicyError
from pipeline.rungs.grounding_switch import SwitchAction
from pipeline.trail.verdict import Verdict, hold

CALL_WINDOW_S = 60.0
"""The calls budget is per minute: calls are counted over a sliding 60 s."""
GUARD_S = 1.0
"""Added to the calls window when admitting: a call is logged when it is admitted and
reaches the endpoint a little later, so the endpoint's own 60 s never holds more."""
TOKEN_BUCKET_S = 60
"""Tokens are kept in per-minute buckets."""
TOKEN_WINDOW_BUCKETS = 24 * 60
"""The tokens budget is per day: 1,440 minutes of buckets."""
MAX_WAIT_S = 30.0
"""Longest `wait` holds an answer for a free slot: a batch must never keep the consumer
from polling past its interval (300 s), and every answer behind it waits too."""
MAX_TENANT_CHARS = 128
"""A tenant name longer than this is cut (it is a key of the table and a metrics label)."""
NO_TENANT = "(none)"
"""The tenant of a candidate that lacks the route's `tenant_field`: all such share one
tenant budget, so leaving the field out buys no extra calls."""
TENANT_ROOTS = frozenset({"metadata", "session_id", "initiator", "route"})
"""Candidate fields a `tenant_field` may start from (`metadata.tenant`, `session_id`)."""
GATE = "judge_budget"
"""The record's `gate` when an answer was not judged because a budget was spent."""


class OverBudget(StrEnum):
    """What an answer that would go to the judge gets when the budget is spent."""

    WAIT = "wait"  # hold it until the window frees (bounded), else the route's fallback
    REVIEW = "review"  # a person decides
    FALLBACK = "fallback"  # escalations.fallback
    REJECT = "reject"  # escalations.reject


ROUTE_KEYS = {
    "judge_calls_per_minute": "calls_per_minute",
    "judge_tokens_per_day": "tokens_per_day",
    "tenant_field": "tenant_field",
    "tenant_judge_calls_per_minute": "tenant_calls_per_minute",
    "tenant_judge_tokens_per_day": "tenant_tokens_per_day",
    "over_budget": "over_budget",
}
"""The route table's keys (`[routes.NAME]`) and the `JudgeBudget` fields they set."""


@dataclass(frozen=True, slots=True)
class JudgeBudget:
    """A route's judge budgets (None: no limit) and what happens over them."""

    calls_per_minute: int | None = None
    """The route's judge calls per minute (an integer >= 1), shared over the partitions."""
    tokens_per_day: int | None = None
    """The route's judge tokens per day (an integer >= 1), shared out likewise."""
    tenant_field: str | None = None
    """A dotted path into the candidate (metadata.…, session_id, …) naming its tenant."""
    tenant_calls_per_minute: int | None = None
    """The same calls budget for each tenant, besides the route's (needs tenant_field)."""
    tenant_tokens_per_day: int | None = None
    """The same tokens budget for each tenant, besides the route's (needs tenant_field)."""
    over_budget: OverBudget = OverBudget.REVIEW
    """What an answer gets when a budget is spent (`wait`: held until the window frees)."""

    def __post_init__(self) -> None:
        names = {v: k for k, v in ROUTE_KEYS.items()}
        for f in ("calls_per_minute", "tokens_per_day"):
            for name in (f, f"tenant_{f}"):
                value = getattr(self, name)
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 1
                ):
                    raise PolicyError(
                        names[name], value, "an integer >= 1 (leave it out: no limit)"
                    )
        if self.tenant_field is not None and not _valid_path(self.tenant_field):
            raise PolicyError(
                "tenant_field",
                self.tenant_field,
                "a dotted path into the candidate starting with one of "
                + ", ".join(sorted(TENANT_ROOTS)),
            )
        tenant_limited = self.tenant_calls_per_minute or self.tenant_tokens_per_day
        if tenant_limited and self.tenant_field is None:
            raise PolicyError(
                "tenant_field", None, "a field naming the tenant, for the tenant_judge_* limits"
            )
        try:
            object.__setattr__(self, "over_budget", OverBudget(self.over_budget))
        except ValueError:
            raise PolicyError(
                "over_budget", self.over_budget, "one of " + ", ".join(o.value for o in OverBudget)
            ) from None

    @classmethod
    def from_route(cls, data: Mapping[str, object], prefix: str) -> JudgeBudget:
        """The budget from a route table's `ROUTE_KEYS`; a bad value fails naming
        ``<prefix>.<key>``."""
        given = {ROUTE_KEYS[k]: v for k, v in data.items() if k in ROUTE_KEYS}
        try:
            return cls(**given)  # type: ignore[arg-type]
        except PolicyError as exc:
            raise PolicyError(f"{prefix}.{exc.field}", exc.value, exc.expected) from None

    @property
    def limited(self) -> bool:
        """Whether any limit is set (otherwise nothing is counted against a share)."""
        return any(
            getattr(self, f.name) is not None
            for f in fields(self)
            if f.name.endswith(("per_minute", "per_day"))
        )

    def to_dict(self) -> dict[str, object]:
        return {k: getattr(self, v) for k, v in ROUTE_KEYS.items()}


def _valid_path(path: object) -> bool:
    if not isinstance(path, str):
        return False
    parts = path.split(".")
    return parts[0] in TENANT_ROOTS and all(p.strip() == p and p for p in parts)


def tenant_of(candidate: object, path: str | None) -> str | None:
    """The tenant a candidate names at `path` (``metadata.tenant``: its metadata's
    ``tenant``); `NO_TENANT` when the field is absent or not a string or integer; None
    when the route has no `tenant_field`."""
    if path is None:
        return None
    first, *rest = path.split(".")
    value: Any = getattr(candidate, first, None)
    for part in rest:
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        return NO_TENANT
    return str(value)[:MAX_TENANT_CHARS]


def partition_share(total: int, partition: int, partitions: int, salt: str) -> int:
    """Partition `partition`'s share of `total` over `partitions`: total // partitions,
    plus one for `total % partitions` partitions in a row starting where a CRC of `salt`
    (the route and tenant) points, so different routes favour different partitions. The
    shares of all partitions sum to `total`."""
    if partitions < 1 or not 0 <= partition < partitions:
        raise ValueError(f"partition {partition} of {partitions}")
    base, extra = divmod(total, partitions)
    start = zlib.crc32(salt.encode("utf-8")) % partitions
    return base + (1 if (partition - start) % partitions < extra else 0)


# ---------------------------------------------------------------------------------------
# Spend


@dataclass(frozen=True, slots=True)
class Limit:
    """One partition's share of a budget: calls per window, tokens per day (None: none)."""

    calls: int | None = None
    tokens: int | None = None


def limits_for(
    budget: JudgeBudget, route: str, tenant: str | None, partition: int, partitions: int
) -> tuple[Limit, Limit | None]:
    """This partition's share of the route's budget and of the tenant's (None without a
    tenant field)."""

    def share(total: int | None, salt: str) -> int | None:
        return None if total is None else partition_share(total, partition, partitions, salt)

    mine = Limit(share(budget.calls_per_minute, route), share(budget.tokens_per_day, route))
    if tenant is None:
        return mine, None
    salt = f"{route}\x00{tenant}"
    return mine, Limit(
        share(budget.tenant_calls_per_minute, salt), share(budget.tenant_tokens_per_day, salt)
    )


def minute_of(at: float) -> int:
    return math.floor(at / TOKEN_BUCKET_S)


def bucket_expiry(minute: int) -> float:
    """When a bucket stops counting: once all of its minute is a day old."""
    return float((minute + 1 + TOKEN_WINDOW_BUCKETS) * TOKEN_BUCKET_S)


@dataclass(frozen=True, slots=True)
class Spend:
    """One partition's spend of one budget: call times (ascending) and tokens per minute."""

    calls: tuple[float, ...] = ()
    tokens: tuple[tuple[int, int], ...] = ()
    """(minute, tokens) in ascending minute order."""

    @property
    def empty(self) -> bool:
        return not self.calls and not self.tokens

    def to_dict(self) -> dict[str, Any]:
        return {"calls": list(self.calls), "tokens": [list(b) for b in self.tokens]}

    @classmethod
    def from_dict(cls, data: object) -> Spend:
        """A spend from its table entry; unreadable parts are dropped (an internal topic
        holds what this module wrote)."""
        if not isinstance(data, Mapping):
            return cls()
        calls = sorted(
            float(c)
            for c in data.get("calls") or ()
            if isinstance(c, int | float) and not isinstance(c, bool) and math.isfinite(c)
        )
        buckets: dict[int, int] = {}
        for entry in data.get("tokens") or ():
            if (
                isinstance(entry, list | tuple)
                and len(entry) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in entry)
            ):
                buckets[entry[0]] = buckets.get(entry[0], 0) + max(0, entry[1])
        return cls(tuple(calls), tuple(sorted(buckets.items())))

    def calls_at(self, at: float, window: float) -> int:
        """Calls that count at `at`: logged after `at - window` (reservations ahead too)."""
        return sum(1 for c in self.calls if c > at - window)

    def tokens_at(self, at: float) -> int:
        return sum(n for m, n in self.tokens if bucket_expiry(m) > at)

    def pruned(self, now: float, window: float) -> Spend:
        """Without what can no longer count at `now` or later."""
        return Spend(
            tuple(c for c in self.calls if c > now - window),
            tuple((m, n) for m, n in self.tokens if bucket_expiry(m) > now and n > 0),
        )

    def reserved(self, at: float, calls: int, tokens: int) -> Spend:
        """With `calls` calls at `at` and `tokens` tokens in `at`'s minute. Negative numbers
        take back part of a reservation made at `at` (calls reserved but never sent, an
        estimate that was too high), never below zero."""
        merged = list(self.calls)
        if calls >= 0:
            merged = sorted((*merged, *([at] * calls)))
        else:
            for _ in range(-calls):
                if at in merged:
                    merged.remove(at)
        buckets = dict(self.tokens)
        minute = minute_of(at)
        buckets[minute] = max(0, buckets.get(minute, 0) + tokens)
        return Spend(tuple(merged), tuple(sorted((m, n) for m, n in buckets.items() if n > 0)))


def earliest(
    spend: Spend, limit: Limit, now: float, calls: int, tokens: int, window: float
) -> float | None:
    """The earliest time at or after `now` when `calls` more calls and `tokens` more
    tokens fit `limit`, behind any call already reserved ahead of `now` (first come,
    first served); None when they never can (a share smaller than the request)."""
    at = now
    if limit.calls is not None:
        if calls > limit.calls:
            return None
        times = spend.calls
        if times and times[-1] > at:
            at = times[-1]
        # Calls at `at` fit when at most `limit.calls - calls` of the logged ones count,
        # i.e. once the oldest `len - (limit - calls)` have left the window.
        leaving = len(times) + calls - limit.calls
        if leaving > 0:
            at = max(at, times[leaving - 1] + window)
    if limit.tokens is not None:
        if tokens > limit.tokens:
            return None
        counted = [(m, n) for m, n in spend.tokens if bucket_expiry(m) > at]
        total = sum(n for _, n in counted)
        for m, n in counted:
            if total + tokens <= limit.tokens:
                break
            total -= n
            at = max(at, bucket_expiry(m))
    return at


# ---------------------------------------------------------------------------------------
# Admission


@dataclass(frozen=True, slots=True)
class Account:
    """One budget an answer draws on: the route's or its tenant's share on this partition."""

    scope: str  # "route" or "tenant"
    name: str
    spend: Spend
    limit: Limit


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether the judge may be called for an answer, and when."""

    admitted: bool
    at: float
    """When the call may go: `now`, or later when `wait` holds it for a free slot."""
    reason: str = ""
    """Why not (or why it waited), for the record."""
    spent: str | None = None
    """The scope whose budget is spent (`route` or `tenant`), when not admitted."""

    def waited(self, now: float) -> float:
        return max(0.0, self.at - now)


def admit(
    accounts: Sequence[Account],
    now: float,
    deadline: float | None,
    calls: int,
    tokens: int,
    over_budget: OverBudget,
    *,
    window: float = CALL_WINDOW_S + GUARD_S,
    max_wait: float = MAX_WAIT_S,
) -> Admission:
    """Admit a call of `calls` requests and about `tokens` tokens against every account:
    now when all have room; under `wait`, at the time the last of them frees when that is
    within `max_wait` and before the `deadline`; otherwise not at all."""
    at, spent, why = now, None, ""
    for account in accounts:
        free = earliest(account.spend, account.limit, now, calls, tokens, window)
        if free is None or free > at:
            at, spent = (math.inf if free is None else free), account.scope
            why = _spent_reason(account, free, now, calls, tokens)
        if free is None:
            break
    if spent is None:
        return Admission(True, now)
    if (
        over_budget is OverBudget.WAIT
        and at - now <= max_wait
        and (deadline is None or at < deadline)
    ):
        return Admission(True, at, f"{why}; waited {at - now:.1f}s for the window to free")
    if over_budget is OverBudget.WAIT:
        limit = f"the {max_wait:.0f}s a wait may last"
        if deadline is not None and at >= deadline and at - now <= max_wait:
            limit = "the deadline"
        why = f"{why}; it frees after {limit}"
    return Admission(False, now, why, spent)


def _spent_reason(account: Account, free: float | None, now: float, calls: int, tokens: int) -> str:
    what = f"{account.scope} {account.name!r}'s judge budget on this partition"
    limit = account.limit
    shares = []
    if limit.calls is not None:
        shares.append(f"{limit.calls} calls/minute")
    if limit.tokens is not None:
        shares.append(f"{limit.tokens} tokens/day")
    if free is None:
        return (
            f"{what} ({', '.join(shares)}) is smaller than one call "
            f"({calls} call(s), ~{tokens} tokens)"
        )
    return f"{what} ({', '.join(shares)}) is spent; it frees in {free - now:.1f}s"


def over_budget_verdict(admission: Admission, over_budget: OverBudget) -> Verdict:
    """The verdict for an answer the budget kept from the judge: never an accept."""
    reason = f"judge not asked: {admission.reason}"
    if over_budget is OverBudget.REVIEW:
        return hold(reason, GATE)
    action = SwitchAction.REJECT if over_budget is OverBudget.REJECT else SwitchAction.FALLBACK
    return Verdict(action, action.value, reason, gate=GATE)


def figures(accounts: Iterable[Account], now: float, window: float) -> dict[str, Any]:
    """What is left of each account at `now`, for the record and the dashboard."""
    out: dict[str, Any] = {}
    for account in accounts:
        limit, spend = account.limit, account.spend
        entry: dict[str, Any] = {"name": account.name}
        if limit.calls is not None:
            entry["calls_share"] = limit.calls
            entry["calls_left"] = max(0, limit.calls - spend.calls_at(now, window))
        if limit.tokens is not None:
            entry["tokens_share"] = limit.tokens
            entry["tokens_left"] = max(0, limit.tokens - spend.tokens_at(now))
        out[account.scope] = entry
    return out


def with_account(accounts: Sequence[Account], scope: str, spend: Spend) -> tuple[Account, ...]:
    """`accounts` with `scope`'s spend replaced."""
    return tuple(replace(a, spend=spend) if a.scope == scope else a for a in accounts)
