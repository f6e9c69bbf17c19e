"""The deterministic core never touches the network: sockets are blocked, then we score."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from pipeline.bounds.thresholds import SGI_DEGENERATE, Thresholds
from pipeline.policy.document import parse_policy
from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
from pipeline.rungs.rule_checks import RuleInput, RulesConfig, evaluate_rules
from pipeline.rungs.self_consistency import decide_consistency
from pipeline.scores.check import Level, check
from pipeline.scores.geometric import compute_dgi_batch, compute_sgi_batch
from tests.fixtures.fakes import FakeEncoder
from tests.fixtures.ladder_scenario import STANDARD, VECTORS
from workers.interfaces import StageContext
from workers.runtime.embedded import run_embedded
from workers.runtime.ladder import build_ladder
from workers.runtime.settings import Settings


class EgressAttempted(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    attempts: list[object] = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise EgressAttempted(f"network connection attempted to {address!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: refuse(None, address))
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda host, *a, **k: refuse(None, (host, "getaddrinfo"))
    )
    yield attempts
    assert attempts == []


def test_the_block_works(no_network):
    with pytest.raises(EgressAttempted):
        socket.create_connection(("192.0.2.1", 80))
    no_network.clear()


def test_scores_switch_check_rules_consistency_stay_offline(no_network):
    encoder = FakeEncoder({"q": [1.0, 0.0], "c": [0.0, 1.0], "r": [0.3, 0.95], "w": [0.95, 0.3]})
    sgi = compute_sgi_batch([("q", "c", "r"), ("q", ["c", "r"], "r"), ("q", "c", "w")], encoder)
    dgi = compute_dgi_batch([("q", "r")], encoder, np.array([-1.0, 1.0]))
    seed = Thresholds()
    switch = GroundingSwitch(
        accept_threshold_sgi=seed.sgi_strong_pass,
        reject_threshold_sgi=seed.sgi_review,
        accept_threshold_dgi=seed.dgi_pass,
        on_reject="regenerate",
    )
    seen = [(round(s.value, 3), check(s, seed).level, switch(s).action) for s in (*sgi, *dgi)]
    assert seen == [
        (4.135, Level.OK, SwitchAction.ACCEPT),  # r at atan(0.95/0.3) from q: SGI = t/(π/2 − t)
        (SGI_DEGENERATE, Level.OK, SwitchAction.ACCEPT),  # r is one of the chunks: capped
        (0.242, Level.RISK, SwitchAction.REGENERATE),  # w hugs the question
        (0.988, Level.OK, SwitchAction.ACCEPT),  # r − q almost along μ̂
    ]
    rules = evaluate_rules(
        RuleInput("how long?", ("kept for ninety days",), "kept for ninety days"), RulesConfig()
    )
    assert rules.action.value == "pass"
    decision = decide_consistency(
        np.array([0.9, 0.92]), np.array([[1.0, 0.95], [0.95, 1.0]]), ["a", "b"]
    )
    assert decision.outcome.value == "committed"
    assert parse_policy({"routes": {"default": {"mode": "shadow"}}}).route("default")


async def test_embedded_ladder_without_endpoints_stays_offline(no_network):
    ctx = StageContext(policy=parse_policy({"policy": {"version": "offline"}}))
    ctx.services["encoder"] = FakeEncoder(VECTORS)
    result = await run_embedded(STANDARD, build_ladder(Settings()), ctx)
    assert len(result.outcomes()) == len(STANDARD)
