"""`tunefleet demo`: the demo tuning end to end with live progress, then the result table."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table

from service.cli.render import out_console, results_table, status_table
from service.client.client import TunefleetClient
from service.core import keys
from service.core.models.goal import GoalSpec
from service.core.models.status import ResultRow
from service.core.settings import FleetSettings
from service.daemon.main import Daemon
from service.goals import demo as demo_goals

REFRESH_S = 0.5
EVENT_ROWS = 12


async def recent_events(client: TunefleetClient, count: int) -> Table:
    table = Table("event", "case", "try", "detail", title="latest events", title_justify="left")
    entries = await client.redis.xrevrange(keys.events(), count=count)
    for _, fields in reversed(entries):
        event = json.loads(fields[b"event"])
        where = f"{event.get('phase', '')}/{event.get('attempt', '')}" if event.get("phase") else ""
        kind = f"{event['kind']} {event.get('step', '')}".strip()
        table.add_row(kind, event.get("case", ""), where, (event.get("detail") or "")[:70])
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
    settings: FleetSettings, tuning_file: Path, workers: int, timeout_s: float, goals_dir: Path | None = None
) -> int:
    """0 when every demo case and every example goal (in `goals_dir`) reached the outcome it declares."""
    console = out_console()
    specs = demo_goals.example_specs(goals_dir) if goals_dir is not None else []
    async with TunefleetClient(settings) as client:
        daemon = Daemon(client)
        reports = await daemon.start([tuning_file])
        name = next(iter(reports))
        total = len(list(client.tuning_store(name).latest_revs()))
        await demo_goals.start_examples(client.goals, specs)
        processes = await start_workers(workers)
        watcher = asyncio.create_task(daemon.run())
        try:
            last = await _follow(client, name, total, specs, timeout_s, console)
        finally:
            daemon.stopping.set()
            await watcher
            await stop_workers(processes, settings.stop_grace_s)
        rows = await client.results(name)
        goals_table, missed_goals = demo_goals.results_table(client.goals, specs)
    console.print(last)
    console.print()
    console.print(results_table(rows))
    code = _summary(console, rows)
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
            if (finished >= total and ended >= len(specs)) or loop.time() > deadline:
                return view
            await asyncio.sleep(REFRESH_S)


def _summary(console: Console, rows: list[ResultRow]) -> int:
    missed = [r for r in rows if r.expected is not None and not r.met]
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
    console.print(f"[green]all {len(rows)} cases reached their declared outcome[/green]")
    return 0
