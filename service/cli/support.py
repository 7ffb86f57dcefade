"""What the CLI's commands share: one `error:` line and exit code 2 for a mistake, the fleet client a
command opens, and output formats."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Annotated, NoReturn, TypeVar

import typer
from redis.exceptions import RedisError
from rich.console import Console
from rich.markup import escape

from service.client.client import TunefleetClient
from service.core import logs
from service.core.errors import TunefleetError
from service.core.settings import FleetSettings

T = TypeVar("T")
LOGGING_COMMANDS = {"daemon", "worker"}
"""Long-running commands whose stderr is a log: their one error line is a log record (JSON when logs are)."""


def fail(message: object, as_log: bool = False) -> NoReturn:
    """One `error:` line on stderr (the message printed as is, never as markup), then exit code 2. With
    `as_log` (a daemon or worker) and logs rendered as JSON, the line is a JSON log record instead."""
    text = " ".join(str(message).split())
    if as_log and logs.renders_json(os.environ.get("TUNEFLEET_LOG_FORMAT", "auto")):
        logs.error_record(text)
    else:
        Console(stderr=True).print(f"[red]error:[/red] {escape(text)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def run(coro: Awaitable[T], as_log: bool = False) -> T:
    """Run a coroutine; a TunefleetError or an error answered by Redis (alone, or the first in an
    exception group) becomes one error line and exit code 2."""
    try:
        return asyncio.run(coro)  # type: ignore[arg-type]
    except (TunefleetError, RedisError) as exc:
        fail(_message(exc), as_log)
    except BaseExceptionGroup as group:
        found = group.subgroup(lambda e: isinstance(e, TunefleetError | RedisError))
        if found is None:
            raise
        fail(_message(_first_leaf(found)), as_log)


def settings_of(ctx: typer.Context) -> FleetSettings:
    """The settings the main command built from its options (kept in the context)."""
    settings: FleetSettings = ctx.obj
    return settings


def with_client(ctx: typer.Context, use: Callable[[TunefleetClient], Awaitable[T]]) -> T:
    """`use` a client of the fleet the command's settings name, opened and closed around it; its errors
    become one error line, as in `run`."""

    async def go() -> T:
        async with TunefleetClient(settings_of(ctx)) as client:
            return await use(client)

    return run(go())


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def _message(exc: BaseException) -> str:
    return f"Redis answered with an error: {exc}" if isinstance(exc, RedisError) else str(exc)


class Format(StrEnum):
    """How `status` and `results` print: a table (whole values when not in a terminal), TSV or JSON."""

    table = "table"
    tsv = "tsv"
    json = "json"


FormatOption = Annotated[
    Format, typer.Option("--format", help="table, tsv (tab-separated, a header line first) or json.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="The same as --format json.")]
TuningArg = Annotated[str, typer.Argument(help="The tuning's name.")]
CaseArg = Annotated[str, typer.Argument(help="The case's id.")]
