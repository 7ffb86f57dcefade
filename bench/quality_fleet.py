"""The tunefleet arms of `bench quality`, on the real fleet: one redis-server, real `python -m workers`
processes, and one tuning per (arm, seed) registered and fed the noisy example's training cases, all at
once. Each tuning's demo agents draw with its own `seed` (workers.adapters.demo_chance), so two seeds
are two independent worlds of chance on the same truth; zero latency, as only the draws matter here.

When every case of every tuning has its result, each tuning is read from the store and Redis: its
current version (the final one), every apply's base and candidate (`apply.json`, and the gate's verdict
when it has one), and its graded runs (`step_finished` events of step `run`, the gates' items
included: eval items ended pass or fail), and its gates' judged decisions (`gate_passed` and
`gate_rejected` with `judged`: a gate with no case to gate on passes unjudged)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, cast

import yaml

from bench.common import Env, run_async, wait_for
from bench.quality_world import Outcome, World, version_rules
from service.core import keys
from service.core.models.acceptance import GateConfig
from service.core.models.records import ApplyRecord

TRIES = 3
MEM_TRIES = 2


def gate_of(arm: str) -> dict[str, Any] | None:
    """The `gate:` section of an arm: none for `a` (the seed's loop), strict for `b`, test for `c`."""
    if arm == "a":
        return None
    has_rules = "rule" in GateConfig.model_fields
    if arm == "b":
        return {"rule": "strict"} if has_rules else {"cases": "passed"}
    if arm == "c":
        if not has_rules:
            raise RuntimeError("arm c needs the gate's `rule: test` (GateConfig has no field `rule`)")
        return {"rule": "test"}
    raise ValueError(f"unknown arm {arm!r}; known: a, b, c")


def tuning_name(arm: str, seed: int) -> str:
    return f"q{arm}-{seed:03d}"


def write_tuning(root: Path, world: World, arm: str, seed: int, example: Path) -> Path:
    """A tuning folder for one arm and seed: the example's system, an empty cases folder (the cases are
    submitted), zero-latency demo agents with the example's judge_flip; its tuning file."""
    folder = root / tuning_name(arm, seed)
    shutil.copytree(example / "system", folder / "system")
    (folder / "cases").mkdir(parents=True)
    adapter = {
        "kind": "demo",
        "seed": seed,
        "jitter": 0,
        "latency": {"run_ms": 0, "analyze_ms": 0, "apply_ms": 0},
        "judge_flip": world.judge_flip,
    }
    body: dict[str, Any] = {
        "name": tuning_name(arm, seed),
        "system": "system",
        "cases": "cases",
        "tries": TRIES,
        "mem_tries": MEM_TRIES,
        "runner": adapter,
        "analyzer": adapter,
        "applier": adapter,
    }
    gate = gate_of(arm)
    if gate is not None:
        body["gate"] = gate
    path = folder / "tuning.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def score_tuning(env: Env, world: World, name: str) -> Outcome:
    """One finished tuning scored against the truth."""
    root = env.settings.store / "tunings" / name
    repo = root / "system.git"
    final = cast(bytes | None, env.stats.client.get(keys.version(name)))
    if final is None:
        raise RuntimeError(f"tuning {name}: no current version in Redis")
    final_rules = version_rules(repo, final.decode())
    events = env.events(name)
    case_runs = sum(
        1
        for e in events
        if e["kind"] == "step_finished" and e["step"] == "run" and e["data"].get("outcome") == "ran"
    )
    gate_runs = sum(
        1 for e in events if e["kind"] == "eval_item_ended" and e["data"].get("outcome") in ("pass", "fail")
    )
    outcome = Outcome(
        final_rules, world.heldout_rate(final_rules), case_runs + gate_runs, gate_runs=gate_runs
    )
    outcome.gates = sum(
        1 for e in events if e["kind"] in ("gate_passed", "gate_rejected") and e["data"].get("judged")
    )
    for path in sorted(root.glob("cases/*/r*/*/*/apply.json")):
        record = ApplyRecord.model_validate_json(path.read_text())
        candidate = record.gate.candidate if record.gate is not None else record.version
        if candidate is None:
            continue
        before, after = version_rules(repo, record.base_version), version_rules(repo, candidate)
        if before == after:
            continue
        judged = record.gate is not None and record.gate.eval is not None
        outcome.count(world.classify(before, after), published=not record.rejected, judged=judged)
    return outcome


def run_arms(
    world: World, arms: list[str], seeds: list[int], example: Path, workers: int, slots: int, timeout_s: float
) -> tuple[dict[tuple[str, int], Outcome], float]:
    """Every (arm, seed) as one tuning on one fleet; their outcomes, and the seconds the fleet took."""
    with Env("quality") as env:
        names: dict[tuple[str, int], str] = {}
        for arm in arms:
            for seed in seeds:
                tuning_file = write_tuning(env.root / "tunings", world, arm, seed, example)
                names[(arm, seed)] = run_async(env.register(tuning_file))
        procs = [env.start_worker(slots) for _ in range(workers)]
        for proc in procs:
            env.wait_worker_ready(proc)
        began = time.monotonic()
        for name in names.values():
            run_async(env.submit(name, world.train))
        total = len(world.train)
        wait_for(
            lambda: all(env.results_done(n) >= total for n in names.values()),
            timeout_s,
            f"{len(names)} tunings' results",
            interval_s=0.5,
        )
        took_s = time.monotonic() - began
        return {key: score_tuning(env, world, name) for key, name in names.items()}, took_s
