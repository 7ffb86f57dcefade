"""`tunefleet gc` with every retention age at 0, on a tuning with a gate (published and rejected
candidates), void tries and two evaluations: it removes something of every kind its policy names, says
beforehand exactly what, and every read of the tuning answers the same afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from service.client.gc.evals_redis import own_fields
from service.core import keys
from service.core.store import Store
from service.kinds.evals.fleet import EvalFiles
from service.kinds.evals.report import build_report
from service.kinds.evals.retired import RETIRED_FILE
from tests.support.disk import disk_use
from tests.support.fleet import Fleet, case, demo_adapter, settings_env, wait_until, write_tuning

ADAPTER = demo_adapter(run_ms=50, analyze_ms=5, apply_ms=5)
KEEPERS = [case("keep-1", forbids=["risky"]), case("keep-2", forbids=["risky"])]
AGES = {f"TUNEFLEET_RETENTION_{what}_AGE_S": "0" for what in ("SNAPSHOT", "CANDIDATE", "EVAL_ITEM", "VOID")}


def cli(fleet: Fleet, *args: str) -> str:
    """`tunefleet ARGS` as a real process, with every retention age at 0; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "service", *args],
        env={**os.environ, **settings_env(fleet.settings), **AGES, "COLUMNS": "200"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def _ended(fleet: Fleet, eval_id: str) -> bool:
    results = EvalFiles(Store(fleet.settings.store)).results(eval_id)
    return results.done == results.items


async def tuned(fleet: Fleet, root: Path) -> tuple[str, str]:
    """Tuning t1 under a strict gate: the keepers and `adds` pass (one published apply), `voids` sets two
    void tries aside, `fixer`'s applies break the keepers and are rejected; then an evaluation of the
    initial version and one of main (their ids)."""
    fleet.start_worker(concurrency=4)
    gate = {"cases": "passed", "sample": 10, "rule": "strict"}
    cases = [*KEEPERS, case("adds", rules=["greet"]), case("voids", voids={"nomem-1": 2})]
    tuning = write_tuning(root, cases, adapter=ADAPTER, gate=gate)
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(len(cases), timeout_s=90)
    (root / "cases" / "fixer.yaml").write_text(yaml.safe_dump(case("fixer", rules=["risky"])))
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(len(cases) + 1, timeout_s=90)
    async with fleet.client() as client:
        before = await client.evals.create("t1", version="initial", name="before")
        after = await client.evals.create("t1", version="main", name="after", repeats=2)
    await wait_until(
        lambda: _ended(fleet, before.id) and _ended(fleet, after.id), 90, "both evaluations to end"
    )
    return before.id, after.id


async def reads(fleet: Fleet, evals: tuple[str, str]) -> dict[str, Any]:
    """Every read a user makes of t1: results, each case's detail, the report (model and text), the
    versions, each version's why and diff from its parent, each evaluation's results and their
    comparison, the list of evaluations (`eval status`, as the API gives it and as text), every
    evaluation's results (what `eval status ID` and `eval results ID` show: the gates' too) and the
    tuning's status."""
    store = Store(fleet.settings.store)
    files = EvalFiles(store)
    every = [spec.id for spec in files.specs("t1")]
    async with fleet.client() as client:
        listed = [p.model_dump(mode="json") for p in await client.evals.progress()]
        status = [t.model_dump(mode="json") for t in (await client.status()).tunings]
        rows = await client.results("t1")
        shown = {row.case: (await client.show("t1", row.case)).model_dump(mode="json") for row in rows}
        versions = await client.versions.list("t1")
        why = {
            v.id: (await client.versions.why("t1", v.id)).model_dump(mode="json") for v in versions.versions
        }
        diffs = {
            v.id: (await client.versions.diff("t1", v.parent, v.id)).model_dump(mode="json")
            for v in versions.versions
            if v.parent is not None
        }
    return {
        "results": [r.model_dump(mode="json") for r in rows],
        "show": shown,
        "report": build_report(store.known_tuning("t1"), files.folder).model_dump(mode="json"),
        "report_text": cli(fleet, "report", "t1"),
        "versions": versions.model_dump(mode="json"),
        "versions_text": cli(fleet, "versions", "t1"),
        "why": why,
        "diff": diffs,
        "evals": [files.results(e).model_dump(mode="json") for e in evals],
        "compare": files.compare(*evals).model_dump(mode="json"),
        "compare_text": cli(fleet, "eval", "compare", *evals),
        "eval_list": listed,
        "eval_list_text": cli(fleet, "eval", "status"),
        "eval_each": {e: files.results(e).model_dump(mode="json") for e in every},
        "status": status,
    }


async def redis_state(fleet: Fleet) -> dict[str, Any]:
    """`tf:evals` and t1's counters as Redis holds them, and the bytes of both keys (MEMORY USAGE)."""
    async with fleet.client() as client:
        redis = client.redis
        heads = await redis.hgetall(keys.evals())  # type: ignore[misc]
        stats = await redis.hgetall(keys.stats("t1"))  # type: ignore[misc]
        used = [await redis.memory_usage(k, samples=0) for k in (keys.evals(), keys.stats("t1"))]
    return {"heads": heads, "stats": stats, "bytes": sum(n or 0 for n in used)}


async def redis_retired(
    fleet: Fleet, said: dict[str, Any], before: dict[str, Any], after: dict[str, Any]
) -> None:
    """gc named every gate's evaluation (and only those) for Redis, and exactly their heads and own
    counters left Redis; the tuning's sums, the user evaluations' entries and the counters rebuilt
    after a loss of Redis agree."""
    retired = {r["name"] for r in said["removals"] if r["kind"] == "eval_redis"}
    gates = {e.decode() for e in before["heads"] if e.decode().startswith("gate-")}
    assert retired == gates and gates, (retired, gates)
    assert {e.decode() for e in after["heads"]} == {e.decode() for e in before["heads"]} - retired
    gone = {f.decode() for f in before["stats"]} - {f.decode() for f in after["stats"]}
    owned = {field for e in retired for field in own_fields(e)}
    assert gone and gone == owned & {f.decode() for f in before["stats"]}, gone
    assert all(after["stats"][f] == v for f, v in before["stats"].items() if f.decode() not in gone)
    fields = sum(r["redis_fields"] for r in said["removals"])
    assert fields == len(gone) + len(retired)
    assert after["bytes"] < before["bytes"], (before["bytes"], after["bytes"])
    async with fleet.client() as client:
        rebuilt = client.evals.stored_counters(Store(fleet.settings.store).tuning("t1"))
    assert not [f for f in rebuilt if f.startswith(tuple(f"eval:{e}:" for e in retired))]
    live = {f.decode(): int(v) for f, v in after["stats"].items() if f.startswith(b"eval")}
    assert {f: n for f, n in rebuilt.items() if f.startswith("eval")} == live


async def test_gc_removes_every_kind_its_policy_names_and_every_read_answers_the_same(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The dry run changes nothing on disk or in Redis and names candidate refs, void tries' agent
    folders, both evaluations' items (and the gates') and the repository's loose files; --apply removes
    exactly the
    candidate refs, void tries and evaluation items it named, with the bytes and inodes it said (the
    repository's packing is measured: its figure is the store's own drop, less the retired record it
    writes), and retires the gates' evaluations from Redis (redis_retired); results, show, the report
    and its text, versions, why, diff, each evaluation's results, `eval compare`, the evaluations' list
    and status answer the same as before, and again after the daemon's reconciliation."""
    evals = await tuned(fleet, tmp_path / "t")
    before = await reads(fleet, evals)
    store = fleet.settings.store
    du_start = disk_use(store)

    redis_start = await redis_state(fleet)
    said = json.loads(cli(fleet, "gc", "--json"))
    assert said["applied"] is False and disk_use(store) == du_start
    assert await redis_state(fleet) == redis_start
    kinds = {r["kind"] for r in said["removals"]}
    assert {"candidate_ref", "void", "eval_items", "repo_packed"} <= kinds, kinds
    emptied = {r["name"] for r in said["removals"] if r["kind"] == "eval_items"}
    assert set(evals) < emptied and any(name.startswith("gate-base-") for name in emptied), emptied
    voids = [r["name"] for r in said["removals"] if r["kind"] == "void"]
    assert voids == ["voids/r1/nomem/1.void-1", "voids/r1/nomem/1.void-2"]

    applied = json.loads(cli(fleet, "gc", "--apply", "--json"))
    assert applied["applied"] is True
    exact = [r for r in applied["removals"] if r["kind"] != "repo_packed"]
    assert exact == [r for r in said["removals"] if r["kind"] != "repo_packed"]
    du_end = disk_use(store)
    record = (store / "evals" / RETIRED_FILE).stat().st_size, 1  # what the retired evaluations left
    assert du_start[0] - du_end[0] + record[0] == sum(r["bytes"] for r in applied["removals"])
    assert du_start[1] - du_end[1] + record[1] == sum(r["inodes"] for r in applied["removals"])
    assert await reads(fleet, evals) == before
    await redis_retired(fleet, said, redis_start, await redis_state(fleet))
    async with fleet.client() as client:  # the daemon's reconciliation puts back no retired head
        await client.evals.reconcile()
    assert await reads(fleet, evals) == before

    again = json.loads(cli(fleet, "gc", "--json"))
    assert again["removals"] == [], again
