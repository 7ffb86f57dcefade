"""Hostile command agents on a real fleet: whatever an agent does, the grade comes from the real analyzer,
the forbidden reads and writes fail, nothing it starts outlives its step, and the other cases finish.

Each test registers a tuning of two cases, `hostile` and `victim` (whose rubric holds a secret), runs
`tests/agents/hostile.py` in every role (honest everywhere but in the role under test, and honest on
the victim), and checks the store, the system repository and the process table afterwards. With
forging agent also hunts the case's attempt folders in the store by path, those of tries to come
included. These run agents as the worker's user (`agent_uid: 0`), with which `sandbox: none` leaves the
store open (docs/adapters.md), so there only the protections that hold without a sandbox are tested:
the loop never takes a forged record (sealed records), the step's keeper and the limits.

The last section runs a root worker as shipped (agents as nobody) on a Redis with the shipped ACL
users, beside a daemon serving its API and another tuning, with OPENAI_API_KEY and the worker's Redis
password in the worker's environment: an agent of each role, in each sandbox kind, reaches for them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from service.core.io.files import read_model
from service.core.models.records import ApplyRecord, Feedback, RunRecord
from service.core.settings import FleetSettings
from tests.support.acl_redis import AclRedis, role_settings
from tests.support.acl_redis import acl_redis as acl_redis  # the fixture
from tests.support.fleet import Fleet, wait_until, write_tuning
from tests.support.fleet import case as demo_case
from tests.support.redis_server import free_port
from tests.support.tools import needs_tool, python_agent_paths

AGENT = str(Path(__file__).parent / "agents" / "hostile.py")
SECRET = "SECRET-RUBRIC-7f3a"
CASES = [
    {"id": "hostile", "rev": 1, "input": "answer plainly", "rubric": [{"id": "plain", "text": "is plain"}]},
    {"id": "victim", "rev": 1, "input": "answer well", "rubric": [{"id": "secret", "text": SECRET}]},
]
ROLE_ARGS = {
    "run": [
        "--input",
        "{input}",
        "--output",
        "{output}",
        "--memory",
        "{memory}",
        "--workspace",
        "{workspace}",
    ],
    "analyze": [
        *("--case", "{case}", "--run", "{run}", "--feedback", "{feedback}", "--analysis", "{analysis}"),
        *("--phase", "{phase}", "--attempt", "{attempt}"),
    ],
    "apply": ["--feedback", "{feedback}", "--worktree", "{worktree}", "--output", "{output}"],
}
ROLE_KEYS = {"run": "runner", "analyze": "analyzer", "apply": "applier"}
LIMITS = {"processes": 64, "file_size_mb": 16, "memory_mb": 2048}
HONEST_STEPS = [
    ("nomem", 1, "run", 100),
    ("nomem", 1, "analyze", 100),
    ("nomem", 1, "apply", 100),
    ("nomem", 2, "run", 100),
    ("nomem", 2, "analyze", 100),
    ("mem", 1, "run", 100),
    ("mem", 1, "analyze", 100),
]
"""What each case records with honest agents: the first try fails, one apply, then it passes."""
STORE_PARENT = "/var/tmp"
PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")
needs_bwrap = needs_tool("bwrap")
SANDBOXES = [pytest.param("bubblewrap", marks=needs_bwrap), "none"]


def _pids_cgroup(tmp_path: Path) -> Path | None:
    """A cgroup (v1 pids hierarchy) this test may make step groups in, when the machine lets it."""
    if not os.access(PIDS_CGROUP_ROOT, os.W_OK):
        return None
    return PIDS_CGROUP_ROOT / f"tunefleet-test-{os.getpid()}-{tmp_path.name}"


@pytest.fixture
def cgroup(tmp_path: Path) -> Iterator[Path | None]:
    group = _pids_cgroup(tmp_path)
    yield group
    if group is not None and group.is_dir():
        for child in group.iterdir():
            if child.is_dir():
                child.rmdir()
        group.rmdir()


@pytest.fixture
def store_outside_tmp() -> Iterator[Path]:
    """The store in a folder outside /tmp (a sandbox's /tmp is its own), so that a sandbox showing the
    host's root would show the store too."""
    folder = Path(tempfile.mkdtemp(prefix="tunefleet-hostile-", dir=STORE_PARENT))
    folder.chmod(0o755)  # as a store's parent usually is: agents of another user reach their folders
    yield folder / "store"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def hostile_settings(settings: FleetSettings, cgroup: Path | None, store_outside_tmp: Path) -> FleetSettings:
    return settings.model_copy(update={"cgroup_dirs": [cgroup] if cgroup else [], "store": store_outside_tmp})


@pytest.fixture
def hostile_fleet(hostile_settings: FleetSettings, tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(hostile_settings, tmp_path / "logs")
    yield fleet
    fleet.teardown()


def adapter(role: str, act: str, sandbox: str, store: Path) -> dict[str, Any]:
    return {
        "kind": "command",
        "argv": [sys.executable, AGENT, act, role, *ROLE_ARGS[role]],
        "timeout_s": 60,
        "env": {"HOSTILE_STORE": str(store)},
        "sandbox": {"kind": sandbox, "readonly_paths": python_agent_paths(), "limits": LIMITS},
    }


async def start(fleet: Fleet, tmp_path: Path, role: str, act: str, sandbox: str) -> None:
    store = fleet.settings.store
    roles = {ROLE_KEYS[r]: adapter(r, act if r == role else "none", sandbox, store) for r in ROLE_ARGS}
    await fleet.start_tuning(write_tuning(tmp_path / "t", CASES, name="t1", tries=2, **roles))
    fleet.start_worker(concurrency=4)


def tuning_dir(fleet: Fleet) -> Path:
    return fleet.settings.store / "tunings" / "t1"


def probes(fleet: Fleet) -> list[dict[str, Any]]:
    """What the hostile agent wrote down of its act, from its own output folders."""
    found = sorted((tuning_dir(fleet) / "cases" / "hostile").rglob("probe.json"))
    return [result for path in found for result in json.loads(path.read_text())["results"]]


def records(fleet: Fleet) -> Iterator[tuple[str, Path]]:
    for name in ("run.json", "feedback.json", "apply.json"):
        for path in (tuning_dir(fleet) / "cases").rglob(name):
            if path.parent.name.isdigit():  # an attempt folder, not an agent's own
                yield name, path


def assert_graded_by_the_real_agents(fleet: Fleet) -> None:
    """The loop took every grade and every apply from the real agents: each case ran, was graded and
    applied exactly as the honest agents lead it (a forged passing grade would have skipped the apply)."""
    finished = [e for e in fleet.events() if e["kind"] == "step_finished"]
    for case in ("hostile", "victim"):
        steps = [(e["phase"], e["attempt"], e["step"], e["tokens"]) for e in finished if e["case"] == case]
        assert sorted(steps) == sorted(HONEST_STEPS), case


def assert_records_are_the_fleets(fleet: Fleet) -> None:
    """Every record in an attempt folder is the fleet's, sealed and chained; none is forged."""
    seen = 0
    for path in (fleet.settings.store / "tunings" / "t1" / "cases").rglob("*.json"):
        if not path.parent.name.isdigit():
            continue  # an agent's own folder, not an attempt's
        assert "FORGED" not in path.read_text(), f"{path} holds a forged record"
        if path.name == "feedback.json":
            feedback = read_model(path, Feedback)
            run = read_model(path.parent / "run.json", RunRecord)
            assert feedback is not None and run is not None and feedback.run_seal == run.seal
            assert feedback.summary == "graded by the real analyzer"
            seen += 1
        if path.name == "apply.json":
            applied = read_model(path, ApplyRecord)
            assert applied is not None and applied.output.summary == "applied by the real applier"
    assert seen == 6


def snapshot_digests(fleet: Fleet) -> dict[str, str]:
    """Each snapshot's digest, against the digest of its version's tree as git keeps it."""
    digests = {}
    for snapshot in sorted((tuning_dir(fleet) / "snapshots").glob("[0-9a-f]*")):
        digest = hashlib.sha256()
        for path in sorted(p for p in snapshot.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(snapshot)).encode() + b"\0" + path.read_bytes())
        digests[snapshot.name] = digest.hexdigest()
    return digests


def archived_digest(repo: Path, version: str, scratch: Path) -> str:
    target = scratch / version
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", f"--git-dir={repo}", "archive", version], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    digest = hashlib.sha256()
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(target)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def assert_system_and_store_untouched(fleet: Fleet, tmp_path: Path, victim_digest: str) -> None:
    tuning = tuning_dir(fleet)
    repo = tuning / "system.git"
    assert not (repo / "hostile").exists() and (repo / "HEAD").read_text() == "ref: refs/heads/main\n"
    subprocess.run(["git", f"--git-dir={repo}", "fsck", "--no-progress"], check=True, capture_output=True)
    for version, digest in snapshot_digests(fleet).items():
        assert digest == archived_digest(repo, version, tmp_path / "archives"), f"snapshot {version} changed"
    files = subprocess.run(
        ["git", f"--git-dir={repo}", "log", "--format=", "--name-only", "main"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    assert "hostile.md" not in files
    assert not (fleet.settings.store / "hostile").exists()
    assert hashlib.sha256((tuning / "cases" / "victim" / "r1" / "case.json").read_bytes()).hexdigest() == (
        victim_digest
    )


def hostile_processes(fleet: Fleet) -> list[int]:
    """Live processes an agent of this test started (its command line names the test's store)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(fleet.settings.store) in cmdline and "hostile" in cmdline and state not in ("Z", "X"):
            alive.append(int(stat.parent.name))
    return alive


async def run_to_the_end(fleet: Fleet, tmp_path: Path, role: str, act: str, sandbox: str) -> None:
    """The hostile tuning from start to its two results, with the checks every act shares."""
    await start(fleet, tmp_path, role, act, sandbox)
    victim_file = tuning_dir(fleet) / "cases" / "victim" / "r1" / "case.json"
    victim_digest = hashlib.sha256(victim_file.read_bytes()).hexdigest()
    rows = await fleet.wait_finished(2, timeout_s=120)
    assert {case: row.state for case, row in rows.items()} == {"hostile": "completed", "victim": "completed"}
    assert fleet.workers[0].poll() is None, "the worker went down"
    assert_graded_by_the_real_agents(fleet)
    if sandbox != "none":  # without a sandbox an agent can overwrite records; the loop never takes them
        assert_records_are_the_fleets(fleet)
    assert_system_and_store_untouched(fleet, tmp_path, victim_digest)
    assert hostile_processes(fleet) == []
    assert probes(fleet), "the hostile agent never acted"
    given = list((tuning_dir(fleet) / "cases").rglob("in/*.json"))
    assert given and not [p for p in given if "seal" in p.read_text()], "an agent was given a seal"


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("role", ["run", "analyze", "apply"])
async def test_forged_records_are_never_taken_for_the_fleets(
    hostile_fleet: Fleet, tmp_path: Path, role: str, sandbox: str
) -> None:
    """An agent that writes feedback.json, run.json and apply.json wherever it can grades nothing: every
    record comes from the real agents (the sandbox keeps it out of the attempt folder; without one,
    the seals make its forgeries count for nothing)."""
    await run_to_the_end(hostile_fleet, tmp_path, role, "forge", sandbox)
    forged = [r for r in probes(hostile_fleet) if r["ok"] and Path(r["target"]).parent.name.isdigit()]
    assert forged, "the agent wrote no forgery where an attempt's records are"


@needs_bwrap
@pytest.mark.parametrize("role", ["run", "analyze", "apply"])
async def test_a_sandboxed_agent_cannot_read_another_case(
    hostile_fleet: Fleet, tmp_path: Path, role: str
) -> None:
    """Under bubblewrap no role can read another case's rubric or feedback."""
    await run_to_the_end(hostile_fleet, tmp_path, role, "read-other", "bubblewrap")
    results = probes(hostile_fleet)
    assert results and [r for r in results if r["ok"]] == []
    assert SECRET not in json.dumps(results)


@needs_bwrap
@pytest.mark.parametrize("role", ["run", "analyze", "apply"])
async def test_a_sandboxed_agent_cannot_write_the_system_or_the_store(
    hostile_fleet: Fleet, tmp_path: Path, role: str
) -> None:
    """Under bubblewrap no role can write the system repository, a snapshot (even after chmod u+w) or
    the store: what it wrote there stayed in its sandbox (the digests are checked in run_to_the_end)."""
    await run_to_the_end(hostile_fleet, tmp_path, role, "write-system", "bubblewrap")
    snapshot_writes = [
        r for r in probes(hostile_fleet) if "/snapshots/" in r["target"] or r["target"].endswith("/system")
    ]
    if role == "run":  # the runner was given its snapshot: bound read-only, chmod cannot open it
        assert snapshot_writes and not any(r["ok"] for r in snapshot_writes)


@needs_bwrap
async def test_a_sandboxed_runner_cannot_read_its_own_rubric(hostile_fleet: Fleet, tmp_path: Path) -> None:
    """The runner is given the task without the rubric, and under bubblewrap cannot reach the case file."""
    await run_to_the_end(hostile_fleet, tmp_path, "run", "read-rubric", "bubblewrap")
    results = probes(hostile_fleet)
    assert results and [r for r in results if r["ok"]] == []
    inputs = list((tuning_dir(hostile_fleet) / "cases" / "hostile").rglob("in/input.json"))
    assert inputs and all("rubric" not in path.read_text() for path in inputs)


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("role", ["run", "analyze", "apply"])
async def test_a_setsid_child_does_not_outlive_its_step(
    hostile_fleet: Fleet, tmp_path: Path, role: str, sandbox: str
) -> None:
    """A child that leaves the agent's session to sleep on is ended with the step."""
    await run_to_the_end(hostile_fleet, tmp_path, role, "setsid", sandbox)
    started = [int(r["detail"]) for r in probes(hostile_fleet) if r["target"] == "setsid"]
    assert started


def _processes_limit_enforced(settings: FleetSettings) -> bool:
    return os.geteuid() != 0 or bool(settings.cgroup_dirs)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_fork_bomb_is_held_to_the_processes_limit(
    hostile_fleet: Fleet, tmp_path: Path, sandbox: str
) -> None:
    """A runner that forks 10,000 sleeping processes gets no more than its limit, and none survives."""
    if not _processes_limit_enforced(hostile_fleet.settings) and os.environ.get("CI") != "true":
        pytest.skip("as root, the processes limit needs a writable pids cgroup")
    await run_to_the_end(hostile_fleet, tmp_path, "run", "fork", sandbox)
    results = [r for r in probes(hostile_fleet) if r["target"] == "fork"]
    assert len(results) == 3  # one per run of the case
    for result in results:
        assert not result["ok"] and int(result["detail"].split()[0]) < LIMITS["processes"], result


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_2gb_write_stops_at_the_file_size_limit(
    hostile_fleet: Fleet, tmp_path: Path, sandbox: str
) -> None:
    """A runner that writes 2 GB into one file is stopped at the file size limit."""
    await run_to_the_end(hostile_fleet, tmp_path, "run", "write-2gb", sandbox)
    results = [r for r in probes(hostile_fleet) if r["target"].endswith("big.bin")]
    assert len(results) == 3  # one per run of the case
    for result in results:
        assert not result["ok"] and "File too large" in result["detail"], result
        assert Path(result["target"]).stat().st_size <= LIMITS["file_size_mb"] * 1024 * 1024


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_an_agent_dies_with_its_worker(hostile_fleet: Fleet, tmp_path: Path, sandbox: str) -> None:
    """SIGKILL of the worker ends its agents and everything they started, sandboxed or not."""
    await start(hostile_fleet, tmp_path, "run", "hang", sandbox)
    await wait_until(lambda: bool(probes(hostile_fleet)), 30, "the hostile runner started its child")
    await wait_until(lambda: len(hostile_processes(hostile_fleet)) >= 2, 10, "the agent and its child")
    hostile_fleet.workers[0].send_signal(signal.SIGKILL)
    hostile_fleet.workers[0].wait()
    await wait_until(lambda: hostile_processes(hostile_fleet) == [], 15, "the agent's processes gone")


# ---------------------------------------------------------------------------------------------
# Secrets and the fleet itself: agents as another user, with their own environment and network

SYSTEM_PYTHON = "/usr/bin/python3"
"""The contained agents' interpreter: the virtualenv's may sit where another user cannot reach (/root)."""
OPENAI_KEY = "sk-hostile-test-7c1d0e"
API_TOKEN = "hostile-test-api-token-5b2e"
SECRET_ACTS = ["env:OPENAI_API_KEY", "env:TUNEFLEET_REDIS_PASSWORD", "every-environ", "redis-ping"]
SECRET_ACTS += ["api-read", "api-write", "parent-environ", "other-tuning"]


def contained_adapter(
    role: str, act: str, sandbox: str, network: bool, where: dict[str, str]
) -> dict[str, Any]:
    """A role of the contained fleet: an honest role is given the meta agent's key (its env allowlist), the
    hostile one nothing of the worker's environment, only where the fleet's parts are."""
    hostile = act != "none"
    return {
        "kind": "command",
        "argv": [SYSTEM_PYTHON, AGENT, act, role, *ROLE_ARGS[role]],
        "timeout_s": 60,
        "env": [f"{k}={v}" for k, v in where.items()] + ([] if hostile else ["OPENAI_API_KEY"]),
        "sandbox": {
            "kind": sandbox,
            "network": network,
            "readonly_paths": [str(Path(AGENT).parent)],
            "limits": LIMITS,
        },
    }


async def run_contained(
    acl: AclRedis, base: FleetSettings, tmp_path: Path, role: str, sandbox: str, network: bool
) -> list[dict[str, Any]]:
    """The hostile tuning next to another one (`t0`), on a Redis with the shipped ACL users, a daemon
    serving its API with a token, and a worker run as root whose environment holds OPENAI_API_KEY and
    its Redis password, its agents as nobody; what the hostile agent's `secrets` act came to."""
    if sandbox == "none" and os.geteuid() != 0:
        pytest.skip("without a sandbox, only a root worker runs its agents as another user")
    submitter = role_settings(base, acl, "submitter").model_copy(
        update={"api_port": free_port(), "api_token": SecretStr(API_TOKEN)}
    )
    worker = role_settings(base, acl, "worker").model_copy(update={"agent_uid": 65534})
    daemon, workers = Fleet(submitter, tmp_path / "logs"), Fleet(worker, tmp_path / "worker-logs")
    try:
        other = write_tuning(tmp_path / "t0", [demo_case("pass")], name="t0")
        await daemon.start_tuning(other)
        where = {
            "HOSTILE_STORE": str(base.store),
            "HOSTILE_REDIS": f"127.0.0.1:{acl.server.port}",
            "HOSTILE_API": f"127.0.0.1:{submitter.api_port}",
            "HOSTILE_OTHER": str(base.store / "tunings" / "t0" / "cases" / "pass" / "r1" / "case.json"),
        }
        roles = {
            ROLE_KEYS[r]: contained_adapter(r, "secrets" if r == role else "none", sandbox, network, where)
            for r in ROLE_ARGS
        }
        # Beside the store (another user reaches it there): a command runs in its tuning file's folder.
        tuning = write_tuning(base.store.parent / "t", CASES, name="t1", tries=2, **roles)
        await daemon.start_tuning(tuning)
        daemon.start_daemon(tuning)
        await wait_until(lambda: _answers(f"http://{where['HOSTILE_API']}/healthz"), 30, "the daemon's API")
        assert Path(where["HOSTILE_OTHER"]).stat().st_mode & 0o004, (
            "the other tuning's file is world-readable"
        )
        workers.start_worker(concurrency=4, OPENAI_API_KEY=OPENAI_KEY)
        rows = await daemon.wait_finished(2, timeout_s=120)
        assert {c: r.state for c, r in rows.items()} == {"hostile": "completed", "victim": "completed"}
        assert_graded_by_the_real_agents(daemon)
        return probes(daemon)
    finally:
        daemon.teardown()
        workers.teardown()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def assert_nothing_reached(results: list[dict[str, Any]], network: bool) -> None:
    """The agent tried every act, and none came to anything (with the network open, a bare TCP connection
    to Redis is all it gets); no secret shows in what it wrote down."""
    for act in SECRET_ACTS:
        assert any(r["target"].startswith(act) for r in results), f"the agent never tried {act}"
    allowed = {"redis-connect"} if network else set()
    reached = [r for r in results if r["ok"] and r["target"] not in allowed]
    assert reached == [], f"the agent reached {reached}"
    assert OPENAI_KEY not in json.dumps(results) and "w-pass-1" not in json.dumps(results)


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("role", ["run", "analyze", "apply"])
async def test_an_agent_reaches_no_secret_and_not_the_fleet(
    acl_redis: AclRedis, hostile_settings: FleetSettings, tmp_path: Path, role: str, sandbox: str
) -> None:
    """An agent of any role, sandboxed or not, run by a root worker whose environment holds the meta
    agent's key and the Redis password, finds neither in its environment, in its parent's or any
    process's /proc/<pid>/environ, cannot open a connection to the fleet's Redis nor to the daemon's
    API (its network is its own), and cannot read another tuning's files in the store."""
    results = await run_contained(acl_redis, hostile_settings, tmp_path, role, sandbox, network=False)
    assert_nothing_reached(results, network=False)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_an_agent_with_the_network_open_still_reaches_nothing(
    acl_redis: AclRedis, hostile_settings: FleetSettings, tmp_path: Path, sandbox: str
) -> None:
    """With `network: true` a runner can open a connection to Redis, but Redis answers it nothing (the
    shipped ACL has no default user and the runner holds no password) and the API refuses it without a
    token; its environment and /proc hold no secret and the other tuning stays hidden."""
    results = await run_contained(acl_redis, hostile_settings, tmp_path, "run", sandbox, network=True)
    assert_nothing_reached(results, network=True)
    by_target = {r["target"]: r for r in results}
    assert by_target["redis-connect"]["ok"], "the network was not open"
    assert "NOAUTH" in by_target["redis-ping"]["detail"]
    assert (
        " 401 " in by_target["api-read"]["detail"] + " " and " 401 " in by_target["api-write"]["detail"] + " "
    )
