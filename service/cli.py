"""`tunefleet`: the command line. Settings are built once here and handed down.

Commands import what they need when they run, so that `tunefleet status` does not pay for the
web server, git or YAML at start-up.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from service import logs
from service.client import TunefleetClient
from service.errors import TunefleetError
from service.models.status import Hold
from service.schema import SCHEMAS, schemas
from service.settings import CONFIG_ENV, FleetSettings

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
T = TypeVar("T")


def _settings(ctx: typer.Context) -> FleetSettings:
    settings: FleetSettings = ctx.obj
    return settings


def _fail(message: object) -> NoReturn:
    """One red `error:` line on stderr (the message printed as is, never as markup), then exit code 2."""
    Console(stderr=True).print(f"[red]error:[/red] {escape(str(message))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _run(coro: Awaitable[T]) -> T:
    """Run a coroutine; a TunefleetError becomes one red line and exit code 2."""
    try:
        return asyncio.run(coro)  # type: ignore[arg-type]
    except TunefleetError as exc:
        _fail(exc)


@app.callback()
def main_options(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option(help="A YAML settings file (or $TUNEFLEET_CONFIG).")] = None,
    store: Annotated[Path | None, typer.Option(help="The store folder (or $TUNEFLEET_STORE).")] = None,
    redis_url: Annotated[str | None, typer.Option(help="redis:// or rediss:// URL.")] = None,
) -> None:
    """Tune an agent's instructions against a data set on a fleet of workers."""
    # Options travel as environment, so that worker processes started from here see them too.
    if config is not None:
        os.environ[CONFIG_ENV] = str(config.resolve())
    if store is not None:
        os.environ["TUNEFLEET_STORE"] = str(store.resolve())
    if redis_url is not None:
        os.environ["TUNEFLEET_REDIS_URL"] = redis_url
    try:
        settings = FleetSettings()
    except ValueError as exc:
        Console(stderr=True).print(f"[red]error:[/red] settings: {exc}", highlight=False)
        raise typer.Exit(2) from None
    logs.configure(settings.log_format, settings.log_level)
    ctx.obj = settings


@app.command()
def worker(
    concurrency: Annotated[int | None, typer.Option(help="Cases this process runs at once.")] = None,
    burst: Annotated[bool, typer.Option(help="Exit when the queue is empty.")] = False,
) -> None:
    """Claim cases from the queue and run the loop on them until stopped (SIGTERM/SIGINT).

    The worker is its own program (`python -m workers`); this command becomes it, so the
    service package never imports the workers package.
    """
    argv = [sys.executable, "-m", "workers"]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    if burst:
        argv.append("--burst")
    os.execv(sys.executable, argv)


@app.command()
def daemon(
    ctx: typer.Context,
    tunings: Annotated[list[Path], typer.Argument(help="Tuning files to register and enqueue.")],
    once: Annotated[bool, typer.Option(help="Enqueue and reconcile once, then exit.")] = False,
) -> None:
    """Register tunings, enqueue their cases, re-enqueue failed ones, keep Redis and the store agreed, and
    serve the HTTP API, the dashboard and /metrics (on api_host:api_port)."""

    from service.daemon import Daemon
    from service.server import serve

    async def go() -> None:
        async with TunefleetClient(_settings(ctx)) as client:
            d = Daemon(client)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, d.stopping.set)
            await d.start(tunings)
            if not once:
                async with asyncio.TaskGroup() as group:
                    group.create_task(serve(client, client.settings, d.stopping))
                    await d.run()

    _run(go())


@app.command()
def submit(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A case file or a folder of them.")],
    tuning: Annotated[str, typer.Option(help="The tuning to submit into.")],
) -> None:
    """Validate case files and enqueue them; a bad file is refused by name, the rest go in."""

    async def go() -> int:
        async with TunefleetClient(_settings(ctx)) as client:
            report = await client.submit_path(tuning, path)
        if not (report.accepted or report.duplicates or report.refused):
            _fail(f"{path}: no case files (*.yaml, *.yml, *.json) in it; nothing submitted")
        console = Console()
        for refusal in report.refused:
            Console(stderr=True).print(
                f"[red]refused[/red] {escape(refusal.error)}", highlight=False, soft_wrap=True
            )
        console.print(
            f"enqueued {len(report.accepted)}, already known {len(report.duplicates)}, "
            f"refused {len(report.refused)}"
        )
        return 1 if report.refused else 0

    raise typer.Exit(_run(go()))


@app.command()
def status(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Queue depth, running cases, outcomes, tokens and cost, from the live counters."""

    from service.render import status_table

    async def go() -> None:
        async with TunefleetClient(_settings(ctx)) as client:
            result = await client.status()
        if as_json:
            print(result.model_dump_json(indent=2))
        else:
            Console().print(status_table(result))

    _run(go())


@app.command()
def results(
    ctx: typer.Context, tuning: str, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """One row per case: case, rev, state, reason, tokens, cost (and the declared outcome, if any);
    unfinished cases of a held tuning say why they wait."""
    from service.render import hold_line, results_table

    client = TunefleetClient(_settings(ctx))
    try:
        client.tuning_store(tuning)
        hold = asyncio.run(_hold_of(client, tuning))
        rows = client.results(tuning, hold)
    except TunefleetError as exc:
        _fail(exc)
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
    else:
        if hold is not None:
            Console().print(hold_line(tuning, hold))
        Console().print(results_table(rows))


async def _hold_of(client: TunefleetClient, tuning: str) -> Hold | None:
    """The tuning's hold; None when Redis cannot be reached (results come from the store alone)."""
    try:
        async with client:
            return await client.hold(tuning)
    except TunefleetError as exc:
        Console(stderr=True).print(
            f"[yellow]warning:[/yellow] holds not read: {escape(str(exc))}", highlight=False
        )
        return None


@app.command()
def show(
    ctx: typer.Context, tuning: str, case: str, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Every attempt of a case: verdict, rubric scores, summary, improvements, apply."""
    from service.render import case_view

    client = TunefleetClient(_settings(ctx))
    try:
        detail = client.show(tuning, case)
    except TunefleetError as exc:
        _fail(exc)
    if as_json:
        print(detail.model_dump_json(indent=2))
    else:
        Console().print(case_view(detail))


@app.command()
def watch(
    ctx: typer.Context,
    refresh_s: Annotated[float, typer.Option(min=0.1, help="Seconds between refreshes.")] = 0.5,
) -> None:
    """Live view: queue, cases under way, tokens, breaker, locks, events; enter follows one agent's log."""
    from service.watch.app import watch as watch_live

    _run(watch_live(_settings(ctx), refresh_s=refresh_s))


@app.command()
def cancel(
    ctx: typer.Context,
    tuning: str,
    case: Annotated[str | None, typer.Argument(help="One case; all unfinished cases if omitted.")] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Cancel a whole tuning without asking for confirmation.")
    ] = False,
) -> None:
    """Cancel a case, or every unfinished case of a tuning: agents are stopped, cases end cancelled.

    Cancelling a whole tuning asks for confirmation; without a terminal it needs `--yes`."""
    client = TunefleetClient(_settings(ctx))
    try:
        cases = list(client.tuning_store(tuning).latest_revs())
    except TunefleetError as exc:
        _fail(exc)
    if case is not None:
        found = [c for c in cases if c.case_id == case]
        if not found:
            _fail(f"tuning {tuning!r} has no case {case!r}; nothing cancelled")
        ended = found[0].result()
        if ended is not None:
            Console().print(
                f"case {escape(case)} already ended {ended.state}: nothing to cancel", highlight=False
            )
            return
    else:
        unfinished = sum(not c.result_file.exists() for c in cases)
        if unfinished == 0:
            Console().print(
                f"tuning {escape(tuning)} has no unfinished case: nothing to cancel", highlight=False
            )
            return
        if not yes:
            _confirm_cancel(tuning, unfinished)

    async def go() -> None:
        async with client:
            done = await client.cancel(tuning, case)
        Console().print(f"cancelled {len(done)} case(s)")

    _run(go())


def _confirm_cancel(tuning: str, unfinished: int) -> None:
    """Ask on a terminal before cancelling a whole tuning; refuse (exit 2) when stdin is not one."""
    what = f"{unfinished} unfinished case(s) of tuning {tuning!r}"
    if not sys.stdin.isatty():
        _fail(f"refusing to cancel {what} without confirmation: stdin is not a terminal (pass --yes)")
    if not typer.confirm(f"Cancel {what}?", default=False):
        Console(stderr=True).print(f"not cancelled: {escape(what)} left as they are", highlight=False)
        raise typer.Exit(1)


@app.command()
def pause(ctx: typer.Context) -> None:
    """Pause the fleet: no new run starts anywhere; steps under way finish."""

    async def go() -> None:
        async with TunefleetClient(_settings(ctx)) as client:
            await client.pause()
        Console().print("paused")

    _run(go())


@app.command()
def resume(
    ctx: typer.Context,
    tuning: Annotated[
        str | None, typer.Argument(help="Release this tuning's hold (a spent budget is waived).")
    ] = None,
) -> None:
    """Resume the fleet after `pause`, or a tuning held for its budget or a refused key."""

    async def go() -> None:
        async with TunefleetClient(_settings(ctx)) as client:
            released = await client.resume(tuning)
        if tuning is None:
            Console().print("resumed")
        else:
            Console().print(f"released {tuning}" if released else f"{tuning} was not held")

    _run(go())


@app.command()
def schema(
    names: Annotated[list[str] | None, typer.Argument(help=f"Any of: {', '.join(SCHEMAS)}")] = None,
) -> None:
    """Print the JSON Schemas of the files and payloads at every boundary (the adapter contract)."""
    unknown = [n for n in names or [] if n not in SCHEMAS]
    if unknown:
        Console(stderr=True).print(
            f"[red]error:[/red] unknown schema {unknown[0]!r}; known: {', '.join(SCHEMAS)}"
        )
        raise typer.Exit(2)
    print(json.dumps(schemas(names), indent=2))


@app.command()
def demo(
    ctx: typer.Context,
    tuning_file: Annotated[Path, typer.Option("--tuning")] = Path("examples/demo/tuning.yaml"),
    workers: Annotated[int, typer.Option(help="Worker processes to start.")] = 2,
    timeout_s: Annotated[float, typer.Option(help="Give up after this long.")] = 600.0,
    goals: Annotated[
        Path | None, typer.Option(help="A folder of goal specs to pursue beside the cases (none: no goals).")
    ] = Path("examples/goals"),
) -> None:
    """Run the demo tuning and the example goals end to end: daemon, worker processes, live progress,
    the result tables."""
    from service.demo import run_demo

    raise typer.Exit(_run(run_demo(_settings(ctx), tuning_file, workers, timeout_s, goals)))


def main() -> None:
    """Console-script entry point."""
    app(prog_name="tunefleet")


def _add_goal_commands() -> None:
    from service.goal_cli import goal_app

    app.add_typer(goal_app, name="goal")


_add_goal_commands()
