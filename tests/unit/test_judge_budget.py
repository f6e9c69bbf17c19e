"""Judge budgets, pure (`pipeline.judge.budget`): partition shares that sum to the budget,
the sliding windows at their edges, admission under each `over_budget`, and that over
budget is never an accept."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.errors import PolicyError
from pipeline.judge.budget import (
    GATE,
    NO_TENANT,
    Account,
    Admission,
    JudgeBudget,
    Limit,
    OverBudget,
    Spend,
    admit,
    bucket_expiry,
    earliest,
    figures,
    limits_for,
    minute_of,
    over_budget_verdict,
    partition_share,
    tenant_of,
)
from pipeline.policy.document import parse_policy
from pipeline.rungs.grounding_switch import SwitchAction
from pipeline.trail.verdict import HOLD
from workers.stages.routes import route as next_topic

W = 61.0  # the production window with its guard


def account(calls: tuple[float, ...] = (), share: int | None = 3, tokens=None, **kw) -> Account:
    limit = Limit(share, kw.get("token_share"))
    return Account("route", "default", Spend(calls, tokens or ()), limit)


class TestShares:
    @pytest.mark.parametrize("total", [1, 2, 3, 7, 12, 40, 1000, 99_999])
    @pytest.mark.parametrize("partitions", [1, 2, 3, 4, 6, 12])
    def test_the_shares_sum_to_the_budget(self, total: int, partitions: int) -> None:
        shares = [partition_share(total, p, partitions, "route-a") for p in range(partitions)]
        assert sum(shares) == total
        assert max(shares) - min(shares) <= 1

    def test_the_remainder_goes_to_different_partitions_for_different_routes(self) -> None:
        favoured = {
            salt: [partition_share(1, p, 8, salt) for p in range(8)].index(1)
            for salt in ("a", "b", "c", "d", "e", "f")
        }
        assert len(set(favoured.values())) > 1

    def test_a_budget_below_the_partition_count_leaves_some_partitions_none(self) -> None:
        assert sorted(partition_share(2, p, 3, "r") for p in range(3)) == [0, 1, 1]

    def test_an_impossible_partition_is_refused(self) -> None:
        with pytest.raises(ValueError):
            partition_share(10, 4, 4, "r")

    def test_route_and_tenant_shares(self) -> None:
        budget = JudgeBudget(12, 1000, "metadata.tenant", 4, None)
        mine, theirs = limits_for(budget, "default", "acme", 1, 4)
        assert mine == Limit(3, 250)
        assert theirs == Limit(1, None)
        assert limits_for(budget, "default", None, 1, 4)[1] is None


class TestCallWindow:
    def test_a_call_counts_until_exactly_the_window_after_it(self) -> None:
        spend = Spend((100.0,))
        assert spend.calls_at(100.0 + W - 0.001, W) == 1
        assert spend.calls_at(100.0 + W, W) == 0

    def test_a_full_share_frees_when_its_oldest_call_leaves_the_window(self) -> None:
        spend = Spend((100.0, 110.0, 120.0))
        assert earliest(spend, Limit(3), 130.0, 1, 0, W) == 100.0 + W
        assert earliest(spend, Limit(3), 100.0 + W, 1, 0, W) == 100.0 + W
        # two more calls need the two oldest gone
        assert earliest(spend, Limit(3), 130.0, 2, 0, W) == 110.0 + W

    def test_room_in_the_share_admits_now(self) -> None:
        assert earliest(Spend((100.0, 110.0)), Limit(3), 130.0, 1, 0, W) == 130.0

    def test_a_call_reserved_ahead_keeps_first_come_first_served(self) -> None:
        # a call waits for 170; a later answer may not jump the queue at 130
        spend = Spend((100.0, 170.0))
        assert earliest(spend, Limit(3), 130.0, 1, 0, W) == 170.0

    def test_more_calls_than_the_share_never_fit(self) -> None:
        assert earliest(Spend(), Limit(1), 0.0, 2, 0, W) is None
        assert earliest(Spend(), Limit(0), 0.0, 1, 0, W) is None

    def test_pruning_forgets_only_what_no_longer_counts(self) -> None:
        spend = Spend((10.0, 50.0, 80.0)).pruned(10.0 + W, W)
        assert spend.calls == (50.0, 80.0)

    def test_the_most_calls_in_any_window_never_exceeds_the_share(self) -> None:
        """Admitting greedily at every 0.5 s for five minutes: every window of the
        production length holds at most the share."""
        spend, log = Spend(), []
        now = 0.0
        while now < 300.0:
            if earliest(spend, Limit(4), now, 1, 0, W) == now:
                spend = spend.reserved(now, 1, 0).pruned(now, W)
                log.append(now)
            now += 0.5
        assert len(log) > 4 * 4  # the window slides: not a lifetime cap
        for start in log:
            assert sum(1 for t in log if start <= t < start + 60.0) <= 4


class TestTokenWindow:
    def test_a_bucket_counts_until_all_of_its_minute_is_a_day_old(self) -> None:
        at = 1_000_000.0
        spend = Spend(tokens=((minute_of(at), 500),))
        end = bucket_expiry(minute_of(at))
        assert end >= at + 86_400
        assert end - (at + 86_400) < 60
        assert spend.tokens_at(end - 0.001) == 500
        assert spend.tokens_at(end) == 0

    def test_tokens_free_when_enough_old_buckets_expire(self) -> None:
        spend = Spend(tokens=((10, 400), (20, 400), (30, 100)))
        now = 31 * 60.0
        assert earliest(spend, Limit(None, 1000), now, 1, 100, W) == now
        assert earliest(spend, Limit(None, 1000), now, 1, 200, W) == bucket_expiry(10)
        assert earliest(spend, Limit(None, 1000), now, 1, 700, W) == bucket_expiry(20)
        assert earliest(spend, Limit(None, 1000), now, 1, 1001, W) is None

    def test_a_reservation_is_corrected_by_what_was_spent(self) -> None:
        spend = Spend().reserved(120.0, 1, 100)
        assert spend.tokens == ((2, 100),)
        assert spend.reserved(120.0, 0, 30).tokens == ((2, 130),)
        assert spend.reserved(120.0, 0, -500).tokens == ()
        assert spend.reserved(120.0, 1, 0).calls == (120.0, 120.0)
        assert spend.reserved(120.0, -1, 0).calls == ()


class TestSpendRecord:
    def test_round_trip(self) -> None:
        spend = Spend((1.5, 2.5), ((3, 40),))
        assert Spend.from_dict(spend.to_dict()) == spend

    @pytest.mark.parametrize(
        "junk",
        [None, [], "x", {"calls": ["a", None, float("nan"), True]}, {"tokens": [[1], ["a", 2]]}],
    )
    def test_an_unreadable_entry_reads_as_what_it_holds_of_use(self, junk) -> None:
        assert Spend.from_dict(junk) == Spend()


class TestAdmission:
    def test_room_admits_now(self) -> None:
        got = admit([account((1.0,))], 10.0, None, 1, 0, OverBudget.REVIEW)
        assert got == Admission(True, 10.0)

    @pytest.mark.parametrize("mode", [OverBudget.REVIEW, OverBudget.FALLBACK, OverBudget.REJECT])
    def test_spent_is_not_admitted_without_wait(self, mode: OverBudget) -> None:
        got = admit([account((1.0, 2.0, 3.0))], 10.0, None, 1, 0, mode)
        assert not got.admitted and got.spent == "route"
        assert "spent" in got.reason and "frees in 52.0s" in got.reason

    def test_wait_admits_at_the_time_the_window_frees(self) -> None:
        got = admit([account((1.0, 2.0, 3.0))], 40.0, None, 1, 0, OverBudget.WAIT)
        assert got.admitted and got.at == 1.0 + W and got.waited(40.0) == pytest.approx(22.0)

    def test_wait_is_bounded(self) -> None:
        got = admit([account((1.0, 2.0, 3.0))], 10.0, None, 1, 0, OverBudget.WAIT, max_wait=30)
        assert not got.admitted and "30s a wait may last" in got.reason

    def test_wait_never_runs_past_the_deadline(self) -> None:
        got = admit([account((1.0, 2.0, 3.0))], 40.0, 60.0, 1, 0, OverBudget.WAIT)
        assert not got.admitted and "the deadline" in got.reason
        assert admit([account((1.0, 2.0, 3.0))], 40.0, 63.0, 1, 0, OverBudget.WAIT).admitted

    def test_wait_does_not_wait_for_what_never_frees(self) -> None:
        got = admit([account(share=0)], 10.0, None, 1, 0, OverBudget.WAIT)
        assert not got.admitted and "smaller than one call" in got.reason

    def test_every_account_must_have_room_the_latest_decides(self) -> None:
        route = account((1.0,), share=3)
        tenant = Account("tenant", "acme", Spend((5.0,)), Limit(1))
        got = admit([route, tenant], 40.0, None, 1, 0, OverBudget.WAIT)
        assert got.admitted and got.at == 5.0 + W
        got = admit([route, tenant], 40.0, None, 1, 0, OverBudget.REVIEW)
        assert not got.admitted and got.spent == "tenant" and "'acme'" in got.reason

    def test_figures_say_what_is_left(self) -> None:
        a = Account("route", "r", Spend((1.0, 2.0), ((0, 30),)), Limit(3, 100))
        assert figures([a], 10.0, W) == {
            "route": {
                "name": "r",
                "calls_share": 3,
                "calls_left": 1,
                "tokens_share": 100,
                "tokens_left": 70,
            }
        }


class TestNeverAcceptedUnjudged:
    @pytest.mark.parametrize("mode", list(OverBudget))
    def test_over_budget_is_never_an_accept(self, mode: OverBudget) -> None:
        verdict = over_budget_verdict(Admission(False, 0.0, "spent"), mode)
        assert verdict.action != SwitchAction.ACCEPT.value
        assert verdict.gate == GATE and verdict.reason.startswith("judge not asked")
        assert next_topic("judge", verdict.routing).value.startswith("escalations.")

    def test_what_each_choice_serves(self) -> None:
        spent = Admission(False, 0.0, "spent")
        assert over_budget_verdict(spent, OverBudget.REVIEW).routing == HOLD
        assert over_budget_verdict(spent, OverBudget.FALLBACK).routing == SwitchAction.FALLBACK
        assert over_budget_verdict(spent, OverBudget.REJECT).routing == SwitchAction.REJECT
        assert over_budget_verdict(spent, OverBudget.WAIT).routing == SwitchAction.FALLBACK


class TestSettings:
    def test_the_route_table_sets_the_budget(self) -> None:
        route = parse_policy(
            {
                "routes": {
                    "default": {
                        "judge_calls_per_minute": 12,
                        "judge_tokens_per_day": 100_000,
                        "tenant_field": "metadata.tenant",
                        "tenant_judge_calls_per_minute": 4,
                        "tenant_judge_tokens_per_day": 20_000,
                        "over_budget": "wait",
                    }
                }
            }
        ).route("default")
        assert route.judge_budget == JudgeBudget(
            12, 100_000, "metadata.tenant", 4, 20_000, OverBudget.WAIT
        )
        assert route.judge_budget.limited

    def test_no_budget_by_default(self) -> None:
        route = parse_policy({}).route("default")
        assert route.judge_budget == JudgeBudget() and not route.judge_budget.limited
        assert route.judge_budget.over_budget is OverBudget.REVIEW

    @pytest.mark.parametrize(
        ("table", "named"),
        [
            ({"judge_calls_per_minute": 0}, "routes.r.judge_calls_per_minute"),
            ({"judge_calls_per_minute": 2.5}, "routes.r.judge_calls_per_minute"),
            ({"judge_tokens_per_day": True}, "routes.r.judge_tokens_per_day"),
            ({"tenant_judge_calls_per_minute": 3}, "routes.r.tenant_field"),
            ({"tenant_field": "tenant"}, "routes.r.tenant_field"),
            ({"tenant_field": "metadata..x"}, "routes.r.tenant_field"),
            ({"over_budget": "accept"}, "routes.r.over_budget"),
            ({"judge_calls_per_hour": 3}, "routes.r.judge_calls_per_hour"),
        ],
    )
    def test_a_bad_value_stops_start_up_naming_the_setting(self, table, named) -> None:
        with pytest.raises(PolicyError) as caught:
            parse_policy({"routes": {"r": table}})
        assert caught.value.field == named
        assert len(str(caught.value).splitlines()) == 1


class TestTenant:
    def candidate(self, **metadata) -> SimpleNamespace:
        return SimpleNamespace(metadata=metadata, session_id="s-1", initiator="agent")

    def test_read_from_the_named_field(self) -> None:
        assert tenant_of(self.candidate(tenant="acme"), "metadata.tenant") == "acme"
        assert tenant_of(self.candidate(org={"id": 7}), "metadata.org.id") == "7"
        assert tenant_of(self.candidate(), "session_id") == "s-1"

    def test_absent_or_odd_shares_one_tenant(self) -> None:
        for odd in ({}, {"tenant": ""}, {"tenant": None}, {"tenant": True}, {"tenant": [1]}):
            assert tenant_of(self.candidate(**odd), "metadata.tenant") == NO_TENANT

    def test_no_field_no_tenant(self) -> None:
        assert tenant_of(self.candidate(tenant="acme"), None) is None

    def test_a_long_name_is_cut(self) -> None:
        assert len(tenant_of(self.candidate(tenant="x" * 1000), "metadata.tenant")) == 128
