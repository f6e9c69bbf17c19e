"""The `groundstream` command: run workers, verify files in-process, and small Kafka tools.

One module per command group, as faust/cli/ is laid out: `base` holds what they share
(settings, the one-line error handling, one-shot Kafka runs); this module only builds the
root group and adds each group's commands. Commands import their heavy libraries inside
their bodies, so `groundstream --help` loads no model and no Kafka client.
"""

from __future__ import annotations

import logging
import sys

import click

from topics.security import redaction
from workers.bench.commands import bench
from workers.cli import (
    acls,
    audit,
    calibrate,
    control,
    encoder,
    evaluate,
    inprocess,
    keys,
    probe,
    reader,
    replay,
    review,
    services,
    tools,
    train,
)
from workers.cli.base import Cli

__all__ = ["main"]


@click.group(cls=Cli)
@click.option(
    "--log-level",
    default=None,
    help="debug, info, warning or error (default GROUNDSTREAM_LOG_LEVEL, else warning; "
    "aiokafka's own start-up chatter shows from info down).",
)
def main(log_level: str | None) -> None:
    """groundstream: keep bad LLM answers out of agent and RAG state."""
    level = (log_level or "warning").upper()
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    redaction.install()  # --log-level debug shows aiokafka's requests, never SASL's bytes
    if logging.getLevelName(level) > logging.INFO:
        # A library's first run on a machine is not the user's business: matplotlib logs
        # "building the font cache" as a warning when that takes over five seconds.
        logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)


for _command in (
    inprocess.verify,
    inprocess.check_command,
    tools.produce,
    tools.consume,
    tools.outcomes,
    tools.topics,
    services.worker,
    services.wait_ready_command,
    services.dashboard,
    services.attach,
    calibrate.calibrate,
    train.train,
    evaluate.eval_command,
    evaluate.determinism,
    review.review,
    control.control,
    replay.replay,
    encoder.encoder,
    reader.reader,
    audit.audit,
    acls.acls,
    keys.keys,
    probe.judge,
    probe.sampler,
    bench,
):
    main.add_command(_command)
