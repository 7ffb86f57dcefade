"""11. Startup cost per agent step: what a command step pays to start and end its agent, the environment,
the sandbox and the step's keeper included, against a bare `fork`+`exec` of the same program.

Each round runs ROUNDS agent steps of `true` (it does nothing, so the figure is all overhead) through the
runner's own process spec (`CommandRunner.process_spec`, then `run_process`) in each sandbox kind the
machine has, with a runner's folders (workspace, memory, out, home, in, the system), on the host a worker
with these settings gives its agents (as root: another user, its folders lent to it, and without a
sandbox the keeper's own namespaces), alternating with a bare `asyncio.create_subprocess_exec("true")`
as the baseline. Reported: the median wall time per step.

    PYTHONPATH=. .venv/bin/python -m bench agent_start
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import Figure, run_async
from service.core.models.tuning import CommandAdapter, SandboxConfig
from service.core.settings import FleetSettings
from workers.adapters.command import CommandRunner
from workers.adapters.process import AgentHost, run_process
from workers.adapters.sandbox import SandboxMounts

NAME = "agent_start"
ROUNDS = 40


async def _bare() -> float:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec("true")
    await proc.wait()
    return (time.perf_counter() - started) * 1000


async def _step(runner: CommandRunner, scratch: Path, n: int) -> float:
    step = scratch / f"step-{n}"
    folders = {name: step / name for name in ("workspace", "memory", "out", "home", "in", "system")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    mounts = SandboxMounts(
        writable=[folders["workspace"], folders["memory"], folders["out"], folders["home"]],
        readonly=[folders["system"], folders["in"]],
        home=folders["home"],
    )
    started = time.perf_counter()
    spec = runner.process_spec({}, step / "run.log", mounts, folders["workspace"])
    result = await run_process(spec)
    elapsed = (time.perf_counter() - started) * 1000
    assert result.exit_code == 0, result.tail
    return elapsed


def _host(store: Path) -> AgentHost:
    """What a worker with this store gives its agents (a plain host before `AgentHost.of_worker` was)."""
    of_worker = getattr(AgentHost, "of_worker", None)
    if of_worker is None:
        return AgentHost(grace_s=2.0)
    return of_worker(FleetSettings(store=store, stop_grace_s=2.0))  # type: ignore[no-any-return]


async def _measure(kind: str, scratch: Path) -> tuple[float, float]:
    config = CommandAdapter(argv=["true"], sandbox=SandboxConfig(kind=kind))
    scratch.mkdir(parents=True, exist_ok=True)
    runner = CommandRunner(config, _host(scratch))
    steps, bare = [], []
    for n in range(ROUNDS):
        steps.append(await _step(runner, scratch / kind, n))
        bare.append(await _bare())
    return statistics.median(steps), statistics.median(bare)


def run() -> list[Figure]:
    kinds = ["none", *(["bubblewrap"] if shutil.which("bwrap") else [])]
    figures = []
    with tempfile.TemporaryDirectory(prefix="tf-bench-start-", dir="/var/tmp") as scratch:
        Path(scratch).chmod(0o755)  # as a store's parent is: an agent of another user reaches its folders
        for kind in kinds:
            step_ms, bare_ms = run_async(_measure(kind, Path(scratch)))
            figures.append(
                Figure(
                    bench=NAME,
                    name=f"start and end one agent step, sandbox {kind}",
                    value=step_ms,
                    unit="ms",
                    baseline=bare_ms,
                    baseline_label="bare fork+exec of the same program",
                    note=f"median of {ROUNDS} steps of `true`",
                )
            )
    return figures


if __name__ == "__main__":
    for figure in run():
        print(f"{figure.name}: {figure.value:.1f} ms (bare {figure.baseline:.2f} ms)")
