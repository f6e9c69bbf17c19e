"""The fault suite: the whole ladder on a real broker, one process per stage, broken on
purpose (workers and broker killed with SIGKILL, the broker stopped), then audited.

Reuses the integration suite's broker fixture; every test here is marked `integration`
and `fault`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.chaos import OwnBroker
from tests.integration.conftest import kafka_bootstrap, topic_prefix
from tests.integration.harness import local_sh

__all__ = ["kafka_bootstrap", "topic_prefix"]

FAULTS_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            item.path.resolve().relative_to(FAULTS_DIR)
        except ValueError:
            continue
        item.add_marker(pytest.mark.integration)
        item.add_marker(pytest.mark.fault)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[OwnBroker]:
    broker = OwnBroker(tmp_path / "kafka")
    broker.start()
    try:
        yield broker
    finally:
        local_sh("stop", env=broker.env, timeout=120)
