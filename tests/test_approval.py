"""Approval before publish (`gate.approval: manual`, issue 52) on a real fleet: a candidate its gate passed
waits for a person, its case parked without a worker slot; `approve` publishes it, `reject` keeps it as a
rejected candidate; a decision made after the worker died and Redis was emptied is still acted on; bad
decisions are refused in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pydantic import SecretStr

from service.api.app import create_app
from service.core.io.files import read_model
from service.core.models.records import ApplyRecord
from service.kinds.evals.history.models import VersionList
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import Fleet, case, demo_adapter, wait_until, write_tuning

WRITE = "tf-approval-write-51c2"
ADAPTER = demo_adapter(run_ms=50, analyze_ms=10, apply_ms=10)
GATE = {"cases": "passed", "sample": 10, "rule": "strict", "approval": "manual"}


def cli(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    return tunefleet(*args, env=fleet_env(fleet.settings))


def waiting(fleet: Fleet, case_id: str) -> list[dict[str, Any]]:
    return [
        e for e in fleet.events() if e["kind"] == "candidate_awaits_approval" and e.get("case") == case_id
    ]


async def parked_candidate(fleet: Fleet, tmp_path: Path, **config: Any) -> tuple[Path, str]:
    """keep-1 passes; then `adds` makes a candidate its gate passes, which waits: the tuning file and the
    candidate's id."""
    root = tmp_path / "t"
    tuning = write_tuning(root, [case("keep-1")], adapter=ADAPTER, gate=GATE, **config)
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(1, timeout_s=60)
    (root / "cases" / "adds.yaml").write_text(yaml.safe_dump(case("adds", rules=["greet"])))
    await fleet.start_tuning(tuning)
    await wait_until(lambda: bool(waiting(fleet, "adds")), 60, "the candidate to wait for approval")
    return tuning, waiting(fleet, "adds")[0]["data"]["candidate"]


def versions(fleet: Fleet) -> VersionList:
    return VersionList.model_validate_json(cli(fleet, "versions", "t1", "--format", "json").stdout)


async def test_an_approved_candidate_is_published_and_its_parked_case_held_no_slot(
    fleet: Fleet, tmp_path: Path
) -> None:
    """On a worker of one slot, `adds` waits for approval while `later` runs and completes in that slot,
    and `status` shows it waiting for a person; `tunefleet approve` then publishes the candidate and
    `adds` completes."""
    fleet.start_worker(concurrency=1)
    tuning, candidate = await parked_candidate(fleet, tmp_path)
    assert [r.status for r in versions(fleet).versions if r.id == candidate] == ["candidate"]
    (tuning.parent / "cases" / "later.yaml").write_text(yaml.safe_dump(case("later")))
    await fleet.start_tuning(tuning)
    await wait_until(
        lambda: fleet.results().get("later") is not None and fleet.results()["later"].state == "completed",
        60,
        "later to complete beside the parked case",
    )
    assert fleet.results()["adds"].state == "unfinished"
    async with fleet.client() as client:
        (status,) = [t for t in (await client.status()).tunings if t.name == "t1"]
    assert status.waiting_by_cause.get("approval") == 1, status.waiting_by_cause
    shown = cli(fleet, "status")
    assert "waiting for a person's approval" in shown.stdout, shown.stdout
    done = cli(fleet, "approve", "t1", candidate[:10], "--note", "reads well")
    assert done.returncode == 0 and f"candidate {candidate[:12]} approved" in done.stdout, done.stderr
    rows = await fleet.wait_finished(3, timeout_s=60)
    assert rows["adds"].state == "completed"
    listed = versions(fleet)
    assert listed.current == candidate and [r.status for r in listed.versions] == ["initial", "published"]
    decided = [e for e in fleet.events() if e["kind"] == "candidate_decided"]
    assert [e["data"]["verdict"] for e in decided] == ["approved"] and "reads well" in decided[0]["detail"]


async def test_a_rejected_candidate_is_kept_and_never_published(fleet: Fleet, tmp_path: Path) -> None:
    """`tunefleet reject` keeps the waiting candidate as a rejected one (its apply `rejected`, the reason
    the person's); the current version stays the import and the case ends difficult."""
    fleet.start_worker(concurrency=2)
    _, candidate = await parked_candidate(fleet, tmp_path, tries=2)
    done = cli(fleet, "reject", "t1", candidate[:10], "--note", "too vague")
    assert done.returncode == 0, done.stderr
    rows = await fleet.wait_finished(2, timeout_s=60)
    assert rows["adds"].state == "difficult"
    attempt = fleet.settings.store / "tunings" / "t1" / "cases" / "adds" / "r1" / "nomem" / "1"
    applied = read_model(attempt / "apply.json", ApplyRecord)
    assert applied is not None and applied.rejected and applied.gate is not None
    assert applied.gate.why == "rejected by a person: too vague"
    listed = versions(fleet)
    assert [(r.status, r.id == candidate) for r in listed.versions] == [
        ("initial", False),
        ("rejected", True),
    ]
    async with fleet.client() as client:
        counts = await client.redis.hgetall("tf:stats:t1")  # type: ignore[misc]
    assert int(counts[b"gates:rejected"]) == 1 and int(counts[b"gates:passed"]) == 0


async def test_an_approval_after_a_worker_kill_and_a_flushall_is_acted_on(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The worker holding the parked case is killed and Redis emptied; the approval, over HTTP with the
    write token (refused without it), is kept in the store; a new daemon start and worker publish it."""
    worker = fleet.start_worker(concurrency=2)
    tuning, candidate = await parked_candidate(fleet, tmp_path)
    worker.kill()
    worker.wait()
    async with fleet.client() as client:
        await client.redis.flushall()
        settings = fleet.settings.model_copy(update={"api_token": SecretStr(WRITE), "api_public_read": True})
        app = create_app(client, settings)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as api:
            path = f"/api/tunings/t1/candidates/{candidate[:12]}/approve"
            assert (await api.post(path)).status_code == 401
            unknown = await api.post("/api/tunings/t1/candidates/abcdef12/approve", headers=_auth())
            assert unknown.status_code == 404 and "version 'abcdef12'" in unknown.json()["error"]
            answer = await api.post(path, headers=_auth(), json={"note": "after the outage"})
            assert answer.status_code == 200 and answer.json()["verdict"] == "approved"
    await fleet.start_tuning(tuning)
    fleet.start_worker(concurrency=2)
    rows = await fleet.wait_finished(2, timeout_s=60)
    assert rows["adds"].state == "completed"
    assert versions(fleet).current == candidate


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {WRITE}"}


async def test_a_decision_on_no_waiting_candidate_is_refused_in_one_line(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Approving a name that is none of the tuning's versions, begins with `-`, holds `..` or a path, names
    another tuning's commit, or the imported version (which waits for nothing) fails with one error line
    naming it; so does rejecting one."""
    fleet.start_worker(concurrency=2)
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("keep-1")], adapter=ADAPTER, gate=GATE))
    other = write_tuning(tmp_path / "o", [case("solo")], name="t2", adapter=ADAPTER)
    (other.parent / "system" / "rules.md").write_text("# Other rules\n")  # a commit t1 does not share
    await fleet.start_tuning(other)
    await fleet.wait_finished(1, timeout_s=60)
    foreign = VersionList.model_validate_json(cli(fleet, "versions", "t2", "--format", "json").stdout).current
    refused = [
        ("abcdef12", "is none of its"),
        ("-x", "is not a version name"),
        ("main..initial", "is not a version name"),
        ("../../etc/passwd", "is not a version name"),
        (foreign[:12], "is none of its"),
        ("initial", "does not wait"),
    ]
    for name, says in refused:
        for action in ("approve", "reject"):
            done = cli(fleet, action, "t1", "--", name)
            assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
            assert done.stderr.startswith("error: tuning t1:") and says in done.stderr, done.stderr


pytestmark = pytest.mark.timeout(240)


async def test_a_waiting_candidate_is_rebased_when_another_is_published_first(
    fleet: Fleet, tmp_path: Path
) -> None:
    """`greets` and `hails` both wait with candidates made on the import; `hails` is approved first and
    published; `greets`, approved after, is re-applied on the new current version (no file in common) and
    published as a re-based commit; with a `remote`, each waiting candidate was pushed to a branch of its
    own for review."""
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(remote)], check=True)
    fleet.start_worker(concurrency=3)
    root = tmp_path / "t"
    tuning = write_tuning(root, [case("keep-1")], adapter=ADAPTER, gate=GATE, remote=str(remote))
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(1, timeout_s=60)
    for case_id in ("greets", "hails"):
        (root / "cases" / f"{case_id}.yaml").write_text(yaml.safe_dump(case(case_id, rules=[case_id])))
    await fleet.start_tuning(tuning)
    await wait_until(lambda: bool(waiting(fleet, "greets") and waiting(fleet, "hails")), 60, "both to wait")
    first, second = (waiting(fleet, c)[0]["data"]["candidate"] for c in ("hails", "greets"))
    branches = subprocess.run(
        ["git", f"--git-dir={remote}", "branch", "--list", "--format=%(refname:short)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert sorted(branches) == sorted(f"tunefleet-candidates/{c[:12]}" for c in (first, second))
    assert cli(fleet, "approve", "t1", first[:12]).returncode == 0
    await wait_until(lambda: versions(fleet).current == first, 60, "hails's candidate to be published")
    assert cli(fleet, "approve", "t1", second[:12]).returncode == 0
    rows = await fleet.wait_finished(3, timeout_s=60)
    assert rows["greets"].state == rows["hails"].state == "completed"
    listed = versions(fleet)
    published = [r for r in listed.versions if r.status == "published"]
    assert [r.origin.case for r in published if r.origin] == ["hails", "greets"]
    rebased = published[1]
    assert (
        rebased.id != second and rebased.parent == first and rebased.gate is not None and rebased.gate.rebased
    )
