"""`tunefleet`: the command line. Settings are built once here and handed down."""

# Commands import what they need when they run, so that `tunefleet status` does not pay for the
# web server, git or YAML at start-up.

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from service.cli.schema import SCHEMAS, schemas
from service.cli.support import (
    LOGGING_COMMANDS,
    CaseArg,
    Format,
    FormatOption,
    JsonOption,
    TuningArg,
    fail,
    run,
    settings_of,
    with_client,
)
from service.client.client import TunefleetClient
from service.core import logs
from service.core.errors import TunefleetError
from service.core.kinds import load_slices
from service.core.models.status import Hold, ResultRow
from service.core.settings import CONFIG_ENV, FleetSettings
from service.core.startup import check_redis_address, load_settings
from service.kinds.registry import BUILT_IN

HELP = "Tune an agent's instructions against a data set on a fleet of workers."

app = typer.Typer(no_args_is_help=True, add_completion=False, help=HELP)


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
        settings = load_settings()
    except TunefleetError as exc:
        fail(exc, ctx.invoked_subcommand in LOGGING_COMMANDS)
    logs.configure(settings.log_format, command_log_level(settings, ctx.invoked_subcommand))
    ctx.obj = settings


def command_log_level(settings: FleetSettings, command: str | None) -> str:
    """The log level of a command: the setting for the daemon and the worker, whose stderr is a log;
    `warning` for every other command unless `log_level` is set, so that what a command says is its own
    output and a warning or an error, never its progress as log lines (issue 53)."""
    if command in LOGGING_COMMANDS or "log_level" in settings.model_fields_set:
        return settings.log_level
    return "warning"


@app.command(help="Claim cases from the queue and run the loop on them until stopped (SIGTERM/SIGINT).")
def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int | None, typer.Option(help="Cases this process runs at once (1 or more).")
    ] = None,
    burst: Annotated[bool, typer.Option(help="Exit when the queue is empty.")] = False,
) -> None:
    # The worker is its own program (`python -m workers`); this command becomes it, so the service
    # package never imports the workers package.
    if concurrency is not None and concurrency < 1:
        what = "the cases this worker runs at once"
        fail(f"--concurrency must be 1 or more (got {concurrency}): {what}", as_log=True)
    try:
        check_redis_address(settings_of(ctx))
    except TunefleetError as exc:
        fail(exc, as_log=True)
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
    """Register tunings and enqueue their cases; serve the HTTP API, the dashboard and /metrics.

    It re-enqueues failed cases, keeps Redis and the store agreed, and serves on api_host:api_port.
    One daemon per fleet: a second one on the same Redis is refused."""
    from service.daemon.main import run_daemon

    run(run_daemon(settings_of(ctx), tunings, once), as_log=True)


@app.command()
def init(
    folder: Annotated[Path, typer.Argument(help="Where to write the tuning (made if need be).")] = Path("."),
    agent: Annotated[
        str, typer.Option(help="command (your own scripts), llm, claude-code or codex: who runs the cases.")
    ] = "command",
) -> None:
    """Write a working tuning to start from: tuning.yaml, instructions, two example cases with rubrics,
    and for `command` three short agent scripts (runner, grader, editor) that follow the contract."""
    from service.cli.init import AGENTS, init_tuning

    if agent not in AGENTS:
        fail(f"--agent {agent!r}: expected one of {', '.join(AGENTS)}")
    try:
        written = init_tuning(folder, agent)
    except TunefleetError as exc:
        fail(exc)
    for path in written:
        print(f"wrote {path}")
    tuning = folder / "tuning.yaml"
    print(f"next: tunefleet check {tuning}, then tunefleet demo --tuning {tuning} (docs/quickstart.md)")


@app.command()
def check(
    tuning_file: Annotated[Path, typer.Argument(help="The tuning file (or the folder holding tuning.yaml).")],
    cases: Annotated[list[Path] | None, typer.Argument(help="More case files or folders to check.")] = None,
) -> None:
    """Check a tuning file and its cases with no Redis and no daemon: every problem at once, by file and
    field; exit 1 when any is an error (warnings alone pass)."""
    from service.client.check import check as check_files

    if tuning_file.is_dir():
        tuning_file = tuning_file / "tuning.yaml"
    report = check_files(tuning_file, cases or [])
    for finding in report.findings:
        print(finding.line())
    errors, warnings = len(report.errors), len(report.warnings)
    verdict = "refused" if errors else "ok"
    counts = f"{errors} error(s), {warnings} warning(s); {report.cases} case file(s) read"
    print(f"{verdict}: {tuning_file}: {counts}")
    raise typer.Exit(1 if errors else 0)


@app.command()
def submit(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A case file or a folder of them.")],
    tuning: Annotated[str, typer.Option(help="The tuning to submit into.")],
) -> None:
    """Validate case files and enqueue them; a bad file is refused by name, the rest go in."""

    report = with_client(ctx, lambda client: client.submit_path(tuning, path))
    if not (report.accepted or report.duplicates or report.refused):
        fail(f"{path}: no case files (*.yaml, *.yml, *.json) in it; nothing submitted")
    for refusal in report.refused:
        Console(stderr=True).print(
            f"[red]refused[/red] {escape(refusal.error)}", highlight=False, soft_wrap=True
        )
    Console().print(
        f"enqueued {len(report.accepted)}, already known {len(report.duplicates)}, "
        f"refused {len(report.refused)}"
    )
    raise typer.Exit(1 if report.refused else 0)


@app.command()
def status(ctx: typer.Context, fmt: FormatOption = Format.table, as_json: JsonOption = False) -> None:
    """Queue depth, running cases, outcomes, tokens and cost, from the live counters."""

    from service.cli.render import print_as, status_table, status_tsv

    result = with_client(ctx, lambda client: client.status())
    print_as(
        Format.json if as_json else fmt,
        lambda: result.model_dump_json(indent=2),
        lambda: status_tsv(result),
        lambda: status_table(result),
    )


@app.command()
def results(
    ctx: typer.Context, tuning: TuningArg, fmt: FormatOption = Format.table, as_json: JsonOption = False
) -> None:
    """One row per case: case, rev, state, reason, tokens, cost, and the declared outcome if any.

    Unfinished cases of a held tuning say why they wait."""
    from rich.console import Group

    from service.cli.render import hold_line, print_as, results_table, results_tsv

    async def go() -> tuple[Hold | None, list[ResultRow]]:
        client = TunefleetClient(settings_of(ctx))
        client.tuning_store(tuning)
        hold = await _hold_of(client, tuning)
        return hold, await client.results(tuning, hold)

    hold, rows = run(go())
    held = [hold_line(tuning, hold)] if hold is not None else []
    print_as(
        Format.json if as_json else fmt,
        lambda: json.dumps([r.model_dump(mode="json") for r in rows], indent=2),
        lambda: results_tsv(rows),
        lambda: Group(*held, results_table(rows)),
    )


async def _hold_of(client: TunefleetClient, tuning: str) -> Hold | None:
    """The tuning's hold; None when Redis cannot be reached (results come from the store alone)."""
    try:
        async with client:
            return await client.hold(tuning)
    except TunefleetError as exc:
        Console(stderr=True).print(
            f"[yellow]warning:[/yellow] holds not read: {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        return None


@app.command()
def show(
    ctx: typer.Context,
    tuning: TuningArg,
    case: CaseArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print it as JSON.")] = False,
) -> None:
    """Every attempt of a case: verdict, rubric scores, summary, improvements, apply."""
    from service.cli.render import case_view, print_json_or

    detail = run(TunefleetClient(settings_of(ctx)).show(tuning, case))
    print_json_or(as_json, detail, lambda: case_view(detail))


@app.command()
def watch(
    ctx: typer.Context,
    refresh_s: Annotated[float, typer.Option(min=0.1, help="Seconds between refreshes.")] = 0.5,
) -> None:
    """Live view: queue, cases under way, tokens, breaker, locks, events; enter follows one agent's log."""
    from service.watch.app import watch as watch_live

    run(watch_live(settings_of(ctx), refresh_s=refresh_s))


@app.command()
def cancel(
    ctx: typer.Context,
    tuning: TuningArg,
    case: Annotated[str | None, typer.Argument(help="One case; all unfinished cases if omitted.")] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Cancel a whole tuning without asking for confirmation.")
    ] = False,
) -> None:
    """Cancel a case, or every unfinished case of a tuning: agents are stopped, cases end cancelled.

    Cancelling a whole tuning asks for confirmation; without a terminal it needs --yes."""
    client = TunefleetClient(settings_of(ctx))
    try:
        cases = list(client.tuning_store(tuning).latest_revs())
    except TunefleetError as exc:
        fail(exc)
    if case is not None:
        found = [c for c in cases if c.case_id == case]
        if not found:
            fail(f"tuning {tuning!r} has no case {case!r}; nothing cancelled")
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

    run(go())


def _confirm_cancel(tuning: str, unfinished: int) -> None:
    """Ask on a terminal before cancelling a whole tuning; refuse (exit 2) when stdin is not one."""
    what = f"{unfinished} unfinished case(s) of tuning {tuning!r}"
    if not sys.stdin.isatty():
        fail(f"refusing to cancel {what} without confirmation: stdin is not a terminal (pass --yes)")
    if not typer.confirm(f"Cancel {what}?", default=False):
        Console(stderr=True).print(f"not cancelled: {escape(what)} left as they are", highlight=False)
        raise typer.Exit(1)


@app.command()
def pause(ctx: typer.Context) -> None:
    """Pause the fleet: no new run starts anywhere; steps under way finish."""

    with_client(ctx, lambda client: client.pause())
    Console().print("paused")


@app.command()
def resume(
    ctx: typer.Context,
    tuning: Annotated[
        str | None, typer.Argument(help="Release this tuning's hold (a spent budget is waived).")
    ] = None,
) -> None:
    """Resume the fleet after `pause`, or a tuning held for its budget or a refused key."""

    released = with_client(ctx, lambda client: client.resume(tuning))
    if tuning is None:
        Console().print("resumed")
    else:
        Console().print(f"released {tuning}" if released else f"{tuning} was not held")


@app.command()
def export(
    ctx: typer.Context,
    tuning: TuningArg,
    folder: Annotated[Path, typer.Argument(help="A new or empty folder to write the files into.")],
    version: Annotated[
        str | None,
        typer.Option(help="A commit id (or a unique prefix of one); default: main, the current one."),
    ] = None,
) -> None:
    """Write a version of a tuning's instructions (default: the current one, main) into a folder, as
    plain files to take home. Reads the store only."""
    from service.client.export import Exported, export_version

    async def go() -> Exported:
        return await export_version(TunefleetClient(settings_of(ctx)).tuning_store(tuning), folder, version)

    done = run(go())
    which = " (main, the current version)" if done.is_main else " (not main: an earlier or other version)"
    print(f"exported version {done.version}{which} of tuning {tuning}: {done.files} file(s) into {folder}")


@app.command()
def gc(
    ctx: typer.Context,
    apply: Annotated[bool, typer.Option("--apply", help="Remove them (without it, only say what).")] = False,
    as_json: JsonOption = False,
) -> None:
    """What the store and Redis keep that nothing needs any more, past the retention ages (old snapshots,
    the cancels of ended jobs, decided candidates' refs, ended evaluations' item folders, void tries'
    agent folders; the repository packed): said, or with --apply removed, with the bytes and inodes it
    frees. Nothing a result, report or version's history reads is removed."""
    from service.cli.render import gc_text, print_json_or
    from service.client.gc import collect

    report = with_client(ctx, lambda client: collect(client.redis, client.settings, apply=apply))
    print_json_or(as_json, report, lambda: gc_text(report))


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


DEMO_TUNING = Path("examples/demo/tuning.yaml")


@app.command()
def demo(
    ctx: typer.Context,
    tuning_file: Annotated[Path, typer.Option("--tuning", help="The tuning file to run.")] = DEMO_TUNING,
    workers: Annotated[int, typer.Option(help="Worker processes to start.")] = 2,
    timeout_s: Annotated[float, typer.Option(help="Give up after this long.")] = 600.0,
    goals: Annotated[
        Path | None,
        typer.Option(
            help="A folder of goal specs to pursue beside the cases (default: examples/goals with the demo "
            "tuning, none with another)."
        ),
    ] = None,
    no_goals: Annotated[bool, typer.Option("--no-goals", help="Pursue no goals, only the cases.")] = False,
    keep_serving: Annotated[
        bool, typer.Option("--keep-serving", help="Serve the dashboard on after the results, until Ctrl-C.")
    ] = False,
) -> None:
    """Run the demo tuning (or yours: --tuning) and the example goals end to end, with live progress,
    then the results.

    It starts the daemon and worker processes itself, on the fleet's Redis and store. In the demo world
    (demo runner and analyzer) it also prints the true held-out pass rates beside the measured ones."""
    from service.cli.demo import run_demo

    if goals is None and tuning_file.resolve() == DEMO_TUNING.resolve() and not no_goals:
        goals = Path("examples/goals")
    try:
        code = run(
            run_demo(
                settings_of(ctx), tuning_file, workers, timeout_s, None if no_goals else goals, keep_serving
            )
        )
    except KeyboardInterrupt:  # Ctrl-C ends --keep-serving
        code = 0
    raise typer.Exit(code)


@app.command("demo-serve")
def demo_serve(
    ctx: typer.Context,
    tuning_file: Annotated[Path, typer.Argument(help="The demo's tuning file.")] = Path(
        "examples/demo/tuning.yaml"
    ),
) -> None:
    """Serve the dashboard of a finished demo (its store) on a loopback port until Ctrl-C, reads open."""
    from service.cli.demo_serve import keep_serving
    from service.cli.render import out_console
    from service.client.tunings import load_tuning_file

    try:
        name = load_tuning_file(tuning_file).name
    except TunefleetError as exc:
        fail(exc)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it ends
        run(keep_serving(settings_of(ctx), out_console(), name))


def main() -> None:
    """Console-script entry point."""
    app(prog_name="tunefleet")


def _add_kind_commands() -> None:
    """Every built-in kind's commands (its slice's `cli` module, service.core.kinds)."""
    for kind in load_slices(BUILT_IN):
        module = kind.front("cli")
        if module is not None:
            module.register(app)


_add_kind_commands()
