"""Logging setup, the one place that touches global logging state.

structlog renders JSON lines when stderr is not a TTY and readable lines when it is; arq's own
stdlib log records go through the same renderer. Context (tuning, case, rev, worker) is bound
per task with structlog.contextvars. Keys that look like secrets are masked.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, Literal

import structlog

SECRET_MARKERS = ("password", "token", "secret", "authorization", "api_key")
_SECRET_KEY = re.compile("|".join(SECRET_MARKERS), re.IGNORECASE)


def mask_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in event.items():
        if isinstance(value, str) and _SECRET_KEY.search(key):
            event[key] = "***"
    return event


def configure(fmt: Literal["auto", "json", "console"] = "auto", level: str = "info") -> None:
    """Configure structlog and stdlib logging once, at a process's entry point."""
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        mask_secrets,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer]
        if as_json
        else [*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    logging.getLogger("arq").setLevel(max(numeric, logging.WARNING))
