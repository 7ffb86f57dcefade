"""`tunefleet demo`: the demo tuning end to end with live progress, then the result table, each case
beside the outcome it declares (`demo.expect` in its case file, read here only)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table

from service.cli.demo_serve import demo_dashboard, keep_serving
from service.cli.render import Declared, out_console, results_table, status_table
from service.client.client import TunefleetClient
from service.client.tunings import load_tuning_file
from service.core import keys
from service.core.errors import CaseFileError, ConfigError
from service.core.models.case import State
from service.core.models.events import parse_event
from service.core.models.status import ResultRow
from service.core.models.tuning import TuningConfig
from service.core.settings import FleetSettings
from service.core.validation import describe_validation
from service.daemon.main import Daemon
from service.kinds.cases.files import case_files, load_case
from service.kinds.evals.fleet import EvalFiles
from service.kinds.evals.render import before_after
from service.kinds.evals.report import REPORT_FILE, build_report
from service.kinds.evals.split import read_split
from service.kinds.evals.truth import true_pass_rate
from service.kinds.goals import demo as demo_goals
from service.kinds.goals.models import GoalSpec
from service.watch.fmt import event_try

REFRESH_S = 0.5
EVENT_ROWS = 12


class CaseExpectation(BaseModel):
    """A demo case's `demo.expect`: the outcome it is built to reach."""

    model_config = ConfigDict(extra="forbid")

    state: State
    reason: str | None = Field(default=None, description="Prefix the real reason must start with.")

    def declared(self, row: ResultRow) -> Declared:
        """The declaration beside the case's row, and whether the row meets it (None: no result yet)."""
        words = self.state + (f": {self.reason}" if self.reason else "")
        if row.state == "unfinished":
            return Declared(words, None)
        met = row.state == self.state and (self.reason is None or (row.reason or "").startswith(self.reason))
        return Declared(words, met)


def expectations(tuning_file: Path) -> dict[str, CaseExpectation]:
    """What the tuning's case files declare, by case id (the newest rev's); ConfigError naming the file
    and the field when a declaration is not one. A case file that cannot be read declares nothing (the
    tuning's registration names it)."""
    found: dict[str, tuple[int, CaseExpectation | None]] = {}
    for path in case_files(load_tuning_file(tuning_file).cases):
        try:
            case = load_case(path)
        except CaseFileError:
            continue
        if case.id in found and found[case.id][0] > case.rev:
            continue
        declared = case.demo.get("expect")
        try:
            expect = None if declared is None else CaseExpectation.model_validate(declared)
        except ValidationError as exc:
            raise ConfigError(describe_validation(exc, f"{path}: demo.expect")) from None
        found[case.id] = (case.rev, expect)
    return {case_id: expect for case_id, (_, expect) in found.items() if expect is not None}


async def recent_events(client: TunefleetClient, count: int) -> Table:
    table = Table("event", "case", "try", "detail", title="latest events", title_justify="left")
    entries = await client.redis.xrevrange(keys.events(), count=count)
    for _, fields in reversed(entries):
        event = parse_event(fields[b"event"])
        where = event_try(event)
        kind = f"{event.kind.value} {event.step or ''}".strip()
        table.add_row(kind, event.case or "", where, (event.detail or "")[:70])
    return table


async def start_workers(count: int) -> list[asyncio.subprocess.Process]:
    return [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "workers",
            env={**os.environ, "TUNEFLEET_LOG_FORMAT": "json"},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        for _ in range(count)
    ]


async def stop_workers(processes: list[asyncio.subprocess.Process], grace_s: float) -> None:
    for proc in processes:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
    for proc in processes:
        try:
            await asyncio.wait_for(proc.wait(), grace_s + 5)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def run_demo(
    settings: FleetSettings,
    tuning_file: Path,
    workers: int,
    timeout_s: float,
    goals_dir: Path | None = None,
    keep: bool = False,
) -> int:
    """0 when every demo case and every example goal (in `goals_dir`) reached the outcome it declares; with
    `keep`, the dashboard is served on after the results until Ctrl-C."""
    code = await _run_demo(settings, tuning_file, workers, timeout_s, goals_dir)
    name = load_tuning_file(tuning_file).name
    console = out_console()
    if keep:
        await keep_serving(settings, console, name)
    else:
        console.print(
            f"to browse the finished tuning ({name}) in the dashboard: tunefleet demo-serve {tuning_file} "
            "(after `make demo`: make demo-serve), or run the demo with --keep-serving",
            highlight=False,
        )
    return code


async def _run_demo(
    settings: FleetSettings, tuning_file: Path, workers: int, timeout_s: float, goals_dir: Path | None = None
) -> int:
    console = out_console()
    specs = demo_goals.example_specs(goals_dir) if goals_dir is not None else []
    expected = expectations(tuning_file)
    async with TunefleetClient(settings) as client:
        daemon = Daemon(client)
        reports = await daemon.start([tuning_file])
        name = next(iter(reports))
        total = len(list(client.tuning_store(name).latest_revs()))
        await demo_goals.start_examples(client.goals, specs)
        processes = await start_workers(workers)
        watcher = asyncio.create_task(daemon.run())
        report_file = held_out_report_file(client, name)
        try:
            async with demo_dashboard(client, settings, console, name):
                last = await _follow(client, name, total, specs, timeout_s, console, report_file)
        finally:
            daemon.stopping.set()
            await watcher
            await stop_workers(processes, settings.stop_grace_s)
        rows = await client.results(name)
        goals_table, missed_goals = demo_goals.results_table(client.goals, specs)
    console.print(last)
    console.print()
    declared = {r.case: expected[r.case].declared(r) for r in rows if r.case in expected}
    console.print(results_table(rows, declared))
    code = _summary(console, rows, declared)
    if report_file is not None:
        # The simulated demo's cases declare their outcomes, and so its held-out cases must improve; a
        # real model's demo declares none: it shows the before and after, both measured.
        code = code or print_held_out(console, client, name, must_improve=bool(expected))
        await print_truth(console, client, name, load_tuning_file(tuning_file))
    if not specs:
        return code
    console.print(goals_table)
    if missed_goals:
        console.print(
            f"[red]{len(missed_goals)} goal(s) did not reach their declared outcome:[/red] "
            + ", ".join(missed_goals)
        )
        return 1
    console.print(f"[green]all {len(specs)} goals reached their declared outcome[/green]")
    return code


async def _follow(
    client: TunefleetClient,
    name: str,
    total: int,
    specs: list[GoalSpec],
    timeout_s: float,
    console: Console,
    report_file: Path | None = None,
) -> Group:
    """Show the fleet live until every case and goal ended (or the time is up); the last view, which the
    live display leaves to the caller to print (a live display's last line ends without a line break)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    with Live(console=console, refresh_per_second=4, transient=True) as live:
        while True:
            status = await client.status()
            tuning = next((t for t in status.tunings if t.name == name), None)
            finished = (tuning.completed + tuning.difficult + tuning.failed) if tuning else 0
            summaries = await client.goals.summaries()
            ended = demo_goals.goals_ended(summaries, specs)
            parts: list[RenderableType] = [status_table(status)]
            if specs:
                parts.append(demo_goals.live_table(summaries))
            parts += [
                await recent_events(client, EVENT_ROWS),
                f"{finished}/{total} cases finished"
                + (f", {ended}/{len(specs)} goals ended" if specs else ""),
            ]
            view = Group(*parts)
            live.update(view)
            reported = report_file is None or report_file.exists()
            if (finished >= total and ended >= len(specs) and reported) or loop.time() > deadline:
                return view
            await asyncio.sleep(REFRESH_S)


def _summary(console: Console, rows: list[ResultRow], declared: dict[str, Declared]) -> int:
    missed = [r for r in rows if r.case in declared and not declared[r.case].met]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    console.print(", ".join(f"{state} {n}" for state, n in sorted(counts.items())))
    if missed:
        console.print(
            f"[red]{len(missed)} case(s) did not reach their declared outcome:[/red] "
            + ", ".join(r.case for r in missed)
        )
        return 1
    if not declared:  # a tuning of one's own (tunefleet init): its cases declare no outcome
        ended = sum(r.state != "unfinished" for r in rows)
        console.print(f"{ended} of {len(rows)} cases ended")
        return 0 if ended == len(rows) else 1
    console.print(f"[green]all {len(rows)} cases reached their declared outcome[/green]")
    return 0


def held_out_report_file(client: TunefleetClient, tuning: str) -> Path | None:
    """Where the daemon writes the tuning's report, when it has a held-out split (else None)."""
    tuning_store = client.tuning_store(tuning)
    return tuning_store.root / REPORT_FILE if read_split(tuning_store) is not None else None


def print_held_out(console: Console, client: TunefleetClient, tuning: str, must_improve: bool) -> int:
    """Print the held-out cases before and after tuning; 0 when both were measured and (if it
    `must_improve`) the final version passed more."""
    report = build_report(client.tuning_store(tuning), EvalFiles(client.store).folder)
    console.print()
    console.print(before_after(report))
    if report.gates is not None:
        gates = report.gates
        console.print(
            f"acceptance gate: {gates.applies} applies gated, {gates.passed} passed and published "
            f"({gates.rebased} re-based), {gates.rejected} rejected; they read {gates.runs} runs, "
            f"{gates.early} stopped early; the gates cost "
            f"${gates.usage.cost_usd:.4f} (REPORT.md)"
        )
    if report.before is None or report.after is None:
        console.print("[red]the held-out cases were not measured before and after the tuning[/red]")
        return 1
    if report.after.rate.rate > report.before.rate.rate:
        console.print(
            "[green]the final version did better than the imported one on held-out cases[/green] "
            "(its pass rate; whether beyond chance is said above)"
        )
        return 0
    if must_improve:
        console.print(
            "[red]the final version did not do better than the imported one on held-out cases[/red]"
        )
        return 1
    console.print("the final version did not do better than the imported one on held-out cases")
    return 0


async def print_truth(console: Console, client: TunefleetClient, tuning: str, config: TuningConfig) -> None:
    """In the demo world, print the true held-out pass rates of the imported and the final version (the
    ground truth, service.kinds.cases.truth) beside the measured ones; nothing elsewhere."""
    evals = EvalFiles(client.store)
    report = build_report(client.tuning_store(tuning), evals.folder)
    store = client.tuning_store(tuning)
    parts = []
    for which, results in (("imported", report.before), ("final", report.after)):
        if results is None:
            continue
        true_rate = await true_pass_rate(config, store, evals.known(results.id), results)
        if true_rate is None:
            return
        parts.append(f"{which} {true_rate:.3f} (measured {results.rate.rate:.3f})")
    if parts:
        console.print("true held-out pass rate (the demo world's ground truth): " + ", ".join(parts))
