"""Real fleets for the tests: tunings on disk, worker processes, the daemon, and ways to watch them."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from service.client.client import TunefleetClient
from service.client.queries import results
from service.core.models.status import ResultRow
from service.core.settings import FleetSettings
from service.daemon.main import Daemon

_END_KINDS = frozenset({"case_completed", "case_difficult", "case_failed", "case_cancelled"})

RUBRIC = [
    {"id": "correct", "text": "The answer is correct."},
    {"id": "brief", "text": "The answer is brief."},
]


def case(case_id: str, **demo: Any) -> dict[str, Any]:
    """A case file's content with the given demo knobs."""
    return {"id": case_id, "rev": 1, "input": f"Question {case_id}", "rubric": RUBRIC, "demo": demo}


def case_folder(folder: Path, cases: list[dict[str, Any]]) -> Path:
    """`folder` (made if missing) with one `<id>.yaml` case file per case: a tuning's cases, an
    evaluation's."""
    folder.mkdir(parents=True, exist_ok=True)
    for body in cases:
        (folder / f"{body['id']}.yaml").write_text(yaml.safe_dump(body))
    return folder


RULE_CASES = [
    case("pass"),
    case("one-apply", rules=["one-apply-a"]),
    case("two-applies", rules=["two-applies-a", "two-applies-b"]),
    case("wrong", rules=["wrong-a", "wrong-b", "wrong-c"]),
    case("flawed", flawed=True),
    case("structural", rules=["structural-a"], structural=True),
    case("no-memory", memory_helps=False),
    case("voids", voids={"nomem-1": 2}),
    case("killed", kills={"nomem-1": 1}),
]
"""One case per rule of the loop that ends without a fault of its own."""


def event_time_s(event: dict[str, Any]) -> float:
    """An event's `at` as a Unix timestamp."""
    return datetime.fromisoformat(event["at"]).timestamp()


def demo_adapter(run_ms: int = 0, analyze_ms: int = 0, apply_ms: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "demo",
        "seed": 1,
        "latency": {"run_ms": run_ms, "analyze_ms": analyze_ms, "apply_ms": apply_ms},
        **extra,
    }


def write_tuning(root: Path, cases: list[dict[str, Any]], name: str = "t1", **config: Any) -> Path:
    """A tuning folder (system, cases, tuning.yaml) below `root`; returns the tuning file."""
    (root / "system").mkdir(parents=True, exist_ok=True)
    (root / "system" / "rules.md").write_text("# Rules\n\n- rule: base\n")
    case_folder(root / "cases", cases)
    adapter = config.pop("adapter", demo_adapter())
    body = {
        "name": name,
        "system": "system",
        "cases": "cases",
        "tries": 3,
        "mem_tries": 2,
        "runner": adapter,
        "analyzer": adapter,
        "applier": adapter,
        **config,
    }
    path = root / "tuning.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def settings_env(settings: FleetSettings) -> dict[str, str]:
    """The settings as TUNEFLEET_* variables, for processes started by the tests."""
    env = {}
    for field, value in settings.model_dump(mode="json").items():
        if value is None:
            continue
        env[f"TUNEFLEET_{field.upper()}"] = (
            json.dumps(value) if isinstance(value, list | dict) else str(value)
        )
    for field in ("redis_password", "api_token", "api_read_token"):  # secrets dump as "**********"
        secret = getattr(settings, field)
        if secret is not None:
            env[f"TUNEFLEET_{field.upper()}"] = secret.get_secret_value()
    return env


def kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL every process still running (thawed first, so that a frozen one dies too) and reap it."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()


class Fleet:
    """Worker processes of one test; whatever is left running is killed at teardown."""

    def __init__(self, settings: FleetSettings, logs: Path) -> None:
        self.settings = settings
        self.logs = logs
        self.logs.mkdir(parents=True, exist_ok=True)
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_worker(self, concurrency: int = 10, **env: str) -> subprocess.Popen[bytes]:
        n = len(self.workers)
        log = (self.logs / f"worker-{n}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers", "--concurrency", str(concurrency)],
            env={**os.environ, **settings_env(self.settings), "TUNEFLEET_LOG_FORMAT": "json", **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.workers.append(proc)
        return proc

    def start_daemon(self, tuning_file: Path) -> subprocess.Popen[bytes]:
        log = (self.logs / "daemon.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", "daemon", str(tuning_file)],
            env={
                **os.environ,
                **settings_env(self.settings),
                "TUNEFLEET_LOG_FORMAT": "json",
                **self._api_port(),
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.workers.append(proc)
        return proc

    def _api_port(self) -> dict[str, str]:
        """A free port for the daemon's API unless the test chose one: a busy port (another test's
        daemon on the default 8321) stops a daemon before it registers anything."""
        return {} if "api_port" in self.settings.model_fields_set else {"TUNEFLEET_API_PORT": "0"}

    def log_of(self, n: int) -> str:
        return (self.logs / f"worker-{n}.log").read_text()

    def teardown(self) -> None:
        kill_all(self.workers)

    def client(self) -> TunefleetClient:
        return TunefleetClient(self.settings)

    async def start_tuning(self, tuning_file: Path) -> str:
        async with self.client() as client:
            reports = await Daemon(client).start([tuning_file])
        return next(iter(reports))

    def events(self, tuning: str = "t1") -> list[dict[str, Any]]:
        """The tuning's events in its file, as a tail reader sees them: read while workers append, the
        last line may be half written (a reader can see part of a write), and is left for the next read."""
        path = self.settings.store / "tunings" / tuning / "events.jsonl"
        if not path.exists():
            return []
        text = path.read_text()
        return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line]

    def results(self, tuning: str = "t1") -> dict[str, ResultRow]:
        return {row.case: row for row in results(self.client().tuning_store(tuning))}

    async def wait_finished(
        self, count: int, tuning: str = "t1", timeout_s: float = 60.0
    ) -> dict[str, ResultRow]:
        """Wait until `count` cases have results (polling the store) and each has its end's event in
        `events.jsonl`; the rows. A case's `result.json` is written before its end's event line
        (docs/architecture.md, "Events"), so a test that reads the events after the results waits for both."""

        def ended() -> bool:
            rows = [r for r in self.results(tuning).values() if r.state != "unfinished"]
            if len(rows) < count:
                return False
            seen = {(e.get("case"), e.get("rev")) for e in self.events(tuning) if e["kind"] in _END_KINDS}
            return all((r.case, r.rev) in seen for r in rows)

        await wait_until(ended, timeout_s, f"{count} cases finished, with their end's events")
        return self.results(tuning)

    async def wait_counted(self, count: int, tuning: str = "t1", timeout_s: float = 30.0) -> None:
        """Wait until `status` counts `count` ended cases of the tuning and none running. A case's
        `result.json` is written before its end's event, whose script moves the counters
        (docs/architecture.md, "Events"): a test that reads counters after `wait_finished` waits here."""

        async def counted() -> bool:
            async with self.client() as client:
                found = [t for t in (await client.status()).tunings if t.name == tuning]
            if not found:
                return False
            t = found[0]
            return t.completed + t.difficult + t.failed + t.cancelled >= count and t.running == 0

        await wait_until(counted, timeout_s, f"status to count {count} ended cases of {tuning}")


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]], timeout_s: float, what: str, interval_s: float = 0.05
) -> float:
    """Poll a condition on real state (a plain or an async predicate) until it holds; the seconds it took.
    Fails the test on timeout."""
    began = time.monotonic()
    while not await _holds(predicate):
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(interval_s)
    return time.monotonic() - began


async def _holds(predicate: Callable[[], bool | Awaitable[bool]]) -> bool:
    held = predicate()
    return await held if inspect.isawaitable(held) else held


def _step_counts(events: list[dict[str, Any]], case_id: str, kind: str) -> dict[tuple[str, int, str], int]:
    counts: Counter[tuple[str, int, str]] = Counter(
        (e["phase"], e["attempt"], e["step"])
        for e in events
        if e.get("case") == case_id and e["kind"] == kind
    )
    return dict(counts)


def step_starts(events: list[dict[str, Any]], case_id: str) -> dict[tuple[str, int, str], int]:
    """How often each (phase, attempt, step) of a case was started."""
    return _step_counts(events, case_id, "step_started")


def step_finishes(events: list[dict[str, Any]], case_id: str) -> dict[tuple[str, int, str], int]:
    """How often each (phase, attempt, step) of a case was recorded."""
    return _step_counts(events, case_id, "step_finished")


def steps_run_twice(events: list[dict[str, Any]], case_id: str) -> dict[tuple[str, int, str], int]:
    """Steps recorded more often than their try was run: once, plus once per void run set aside."""
    asides: dict[tuple[str, int], int] = {}
    for event in events:
        if event.get("case") == case_id and event["kind"] == "attempt_set_aside":
            key = (event["phase"], event["attempt"])
            asides[key] = asides.get(key, 0) + 1
    return {
        key: n for key, n in step_finishes(events, case_id).items() if n > 1 + asides.get((key[0], key[1]), 0)
    }
