"""SIGKILL during a gate, on a real fleet: first of a worker running one of the gate's items, then of the
worker whose case made the candidate. The gate completes, and the candidate is published exactly once."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from service.core import keys
from tests.support.fleet import Fleet, case, demo_adapter, wait_until, write_tuning

SLOW_PASSERS = [case(f"p-{n}", latency_ms=1200) for n in (1, 2, 3)]
FIXER = case("fixer", rules=["fine"], latency_ms=100)


def kinds(fleet: Fleet, kind: str) -> list[dict[str, Any]]:
    return [e for e in fleet.events() if e["kind"] == kind]


def pid_of(event: dict[str, Any]) -> int:
    return int(event["worker"].rsplit(":", 1)[1])


def gate_items(fleet: Fleet, kind: str, eval_id: str) -> list[tuple[str, int, int]]:
    return [
        (e["case"], e["data"]["repeat"], pid_of(e))
        for e in kinds(fleet, kind)
        if e["data"].get("eval") == eval_id
    ]


async def test_a_gate_survives_sigkill_of_an_item_worker_then_of_the_candidates_worker(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The gate's items and the gating case are taken over after their workers die: the gate starts once,
    every item ends once, one verdict is given, and the candidate is published exactly once."""
    root = tmp_path / "t"
    tuning = write_tuning(
        root, SLOW_PASSERS, adapter=demo_adapter(run_ms=100), gate={"sample": 10, "rule": "strict"}
    )
    workers = [fleet.start_worker(concurrency=1) for _ in range(3)]
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(3, timeout_s=60)
    (root / "cases" / "fixer.yaml").write_text(yaml.safe_dump(FIXER))
    await fleet.start_tuning(tuning)
    await wait_until(lambda: bool(kinds(fleet, "gate_started")), 30, "the fixer's gate to start")
    started = kinds(fleet, "gate_started")[0]
    case_worker = next(proc for proc in workers if proc.pid == pid_of(started))
    eval_id = started["data"]["gate_eval"]
    by_pid = {proc.pid: proc for proc in workers if proc is not case_worker}

    def a_helper_runs_an_item() -> bool:
        ended = {(c, k) for c, k, _ in gate_items(fleet, "eval_item_ended", eval_id)}
        return any(
            pid in by_pid and (c, k) not in ended
            for c, k, pid in gate_items(fleet, "eval_item_started", eval_id)
        )

    await wait_until(a_helper_runs_an_item, 30, "a gate item on a helper worker")
    ended = {(c, k) for c, k, _ in gate_items(fleet, "eval_item_ended", eval_id)}
    victim = next(
        by_pid[pid]
        for c, k, pid in gate_items(fleet, "eval_item_started", eval_id)
        if pid in by_pid and (c, k) not in ended
    )
    victim.kill()
    victim.wait()
    assert not kinds(fleet, "gate_passed")
    case_worker.kill()
    case_worker.wait()
    fleet.start_worker(concurrency=3)
    rows = await fleet.wait_finished(4, timeout_s=90)
    assert rows["fixer"].state == "completed", rows["fixer"]
    assert len(kinds(fleet, "gate_started")) == 1
    assert len(kinds(fleet, "gate_passed")) == 1 and not kinds(fleet, "gate_rejected")
    endings = [(c, k) for c, k, _ in gate_items(fleet, "eval_item_ended", eval_id)]
    assert sorted(endings) == [("p-1", 1), ("p-2", 1), ("p-3", 1)]
    applies = [
        e
        for e in kinds(fleet, "step_finished")
        if e["case"] == "fixer" and e["step"] == "apply" and e.get("attempt") == 1
    ]
    assert [e["data"]["outcome"] for e in applies] == ["published"]
    async with fleet.client() as client:
        version = (await client.redis.get(keys.version("t1"))).decode()
    repo = fleet.settings.store / "tunings" / "t1" / "system.git"
    commits = subprocess.run(
        [
            "git",
            f"--git-dir={repo}",
            "log",
            "--format=%H",
            "--fixed-strings",
            "--grep=t1/fixer/r1/nomem/1",
            version,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert commits == [applies[0]["data"]["version"]]
