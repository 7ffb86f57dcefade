"""Logging setup, the one place that touches global logging state.

An entry point (CLI command, worker, daemon) calls `configure`: structlog renders JSON lines when
stderr is not a TTY and readable lines when it is; arq's own stdlib log records go through the same
renderer. Context (tuning, case, rev, worker) is bound per task with structlog.contextvars. Keys that
look like secrets are masked.

Used as a library (the Python client in someone else's program), tunefleet configures no logging:
`library_defaults` (run on import of `service`, and only while structlog is unconfigured) hands its
events to stdlib loggers named after their modules, where the program's own logging config decides;
with none, Python prints warnings and errors to stderr and drops the rest. Never to stdout.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import MutableMapping
from datetime import UTC, datetime
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
            # a foreign record's exc_info (uvicorn's "Exception in ASGI application") as its traceback's
            # text, not `<traceback object>`
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *([structlog.processors.format_exc_info] if as_json else []),
                renderer,
            ],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    logging.getLogger("arq").setLevel(max(numeric, logging.WARNING))


def renders_json(fmt: str) -> bool:
    """Whether `configure(fmt)` renders JSON lines (always for `json`; for `auto`, off a TTY)."""
    return fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())


def error_record(error: str, event: str = "startup_failed") -> None:
    """One JSON error line on stderr, shaped as `configure`'s records, for a failure before (or without)
    logging being configured."""
    at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    sys.stderr.write(json.dumps({"error": error, "event": event, "level": "error", "timestamp": at}) + "\n")
    sys.stderr.flush()


def _as_message(_: Any, __: str, event: MutableMapping[str, Any]) -> str:
    """An event as one stdlib log message: its name, then its keys."""
    name = event.pop("event", "")
    return " ".join([str(name), *(f"{key}={value!r}" for key, value in event.items())])


def library_defaults() -> None:
    """Unless the program configured structlog already, send tunefleet's events to stdlib logging."""
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, mask_secrets, _as_message],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
