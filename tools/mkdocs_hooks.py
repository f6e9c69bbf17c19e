"""MkDocs hooks (mkdocs.yml `hooks:`): a link to a file the site excludes fails a strict build.

MkDocs reports a link to a file under `exclude_docs` (docs/bench.jsonl, the eval runs'
figures) at INFO whatever `validation:` says, so `--strict` let such a dead link through.
This hook raises that one message to a WARNING, which `--strict` counts.
"""

from __future__ import annotations

import logging
from typing import Any

EXCLUDED_LINK = "which is excluded from the built site"
"""MkDocs' own words for a link to an excluded file (mkdocs.structure.pages)."""


class _ExcludedLinkIsAWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if EXCLUDED_LINK in record.getMessage() and record.levelno < logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_FILTER = _ExcludedLinkIsAWarning()


def on_config(config: Any) -> Any:
    """Install the filter on the logger that reports links (once, however often called)."""
    logger = logging.getLogger("mkdocs.structure.pages")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return config
