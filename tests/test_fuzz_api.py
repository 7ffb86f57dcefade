"""The HTTP API fuzzed from its own `/openapi.json` by Schemathesis (issue 54): a real daemon process
serving the API on a real Redis, a real worker running whatever the fuzzer gets accepted. Every route
is called with generated paths, queries and bodies, with the write token (which reads too). No answer
may be a 500, none may take longer than ANSWER_MAX_S, every status and body must be as the document
lists them (it found a batch's whole-body 422 documented as a per-item one), and no job the fuzzer got
accepted (cases, batches, goals, evaluations) may crash the worker.

Examples per route: 25 under `CI=true`, 10 otherwise (FUZZ_EXAMPLES overrides both); the run prints
how many requests it made.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err, Ok
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, demo_adapter, write_tuning
from tests.support.redis_server import RedisServer, free_port

WRITE = "tf-fuzz-write-token-0d2f"
READ = "tf-fuzz-read-token-77a1"
ANSWER_MAX_S = 10.0
CI = os.environ.get("CI", "").lower() == "true"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25" if CI else "10"))
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
"""No 5xx; a status the document lists for the route; a body of the schema it lists for that status."""
KNOWN = {"tuning": "t1", "case": "a", "eval": "e0", "other": "e0", "goal": "g0"}
"""Path parameters that name what the fixture made, so that a third of the requests reach past the 404
into the handlers (another third draws them at random; the last third is negative: bodies, queries and
paths that the document says are wrong)."""
CRASHES = ("job_crashed", "_crashed_at_claim", "job_run_crashed", "Traceback")
"""What a worker's log holds when a job crashed it (the envelope's and the scheduler's events)."""


class FuzzedFleet:
    """The daemon (API on `port`) and the worker the fuzzer runs against, and the requests it made."""

    def __init__(self, fleet: Fleet, port: int) -> None:
        self.fleet = fleet
        self.base_url = f"http://127.0.0.1:{port}"
        self.requests = 0
        self.slowest_s = 0.0


@pytest.fixture
def fuzzed(tmp_path: Path) -> Iterator[FuzzedFleet]:
    """A redis-server, a daemon serving tuning t1 (three demo cases) with both tokens, and a worker."""
    root = tmp_path
    redis = RedisServer(root / "redis")
    redis.start()
    port = free_port()
    settings = FleetSettings(
        redis_url=redis.url,
        store=root / "store",
        poll_delay_s=0.05,
        lease_s=3.0,
        reconcile_interval_s=1.0,
        api_port=port,
        api_token=SecretStr(WRITE),
        api_read_token=SecretStr(READ),
        agent_uid=0,
    )
    fleet = Fleet(settings, root / "logs")
    try:
        fleet.start_daemon(
            write_tuning(root / "t", [case("a"), case("b"), case("c")], adapter=demo_adapter(run_ms=20))
        )
        fleet.start_worker(concurrency=4)
        _wait_ready(f"http://127.0.0.1:{port}/readyz", 60)
        _post(port, "/api/tunings/t1/evals", {"name": "e0"})
        _post(port, "/api/goals", {"id": "g0", "goal": "finish the fuzzing"})
        yield FuzzedFleet(fleet, port)
    finally:
        fleet.teardown()
        redis.stop()


def _post(port: int, path: str, body: dict[str, Any]) -> None:
    """A write the fuzzer's known path parameters name (with the write token); it must be accepted."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {WRITE}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status in (200, 201), answer.status


def _wait_ready(url: str, timeout_s: float) -> None:
    """Poll the daemon's /readyz until it answers 200."""
    began = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"the daemon was not ready within {timeout_s} s ({url})")
        time.sleep(0.1)


def fuzz_route(fuzzed: FuzzedFleet, operation: Any) -> None:
    """EXAMPLES generated requests to one route: each gets a documented status that is not a 5xx, within
    ANSWER_MAX_S (Hypothesis drives Schemathesis' strategies: its pytest plugin's lazy loader does not
    run on this pytest)."""
    known = {name: value for name, value in KNOWN.items() if "{" + name + "}" in operation.path}
    strategy = st.one_of(
        operation.as_strategy(path_parameters=known or None),
        operation.as_strategy(),
        operation.as_strategy(GenerationMode.NEGATIVE, path_parameters=known or None),
    )

    @given(case=strategy)
    @hypothesis_settings(
        max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    def fuzz(case: Any) -> None:
        began = time.monotonic()
        response = case.call(
            base_url=fuzzed.base_url, headers={"Authorization": f"Bearer {WRITE}"}, timeout=ANSWER_MAX_S
        )
        took_s = time.monotonic() - began
        fuzzed.requests += 1
        fuzzed.slowest_s = max(fuzzed.slowest_s, took_s)
        assert took_s < ANSWER_MAX_S, f"{case.method} {case.formatted_path} took {took_s:.1f} s"
        case.validate_response(response, checks=CHECKS)

    fuzz()


def _status(fuzzed: FuzzedFleet) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{fuzzed.base_url}/api/status", headers={"Authorization": f"Bearer {READ}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        found: dict[str, Any] = json.loads(answer.read())
    return found


def _drained(fuzzed: FuzzedFleet, timeout_s: float) -> bool:
    """Resume the fleet (the fuzzer may have left it paused) and wait until the worker ran every job
    the fuzzer got accepted (no job queued, none in progress)."""
    port = int(fuzzed.base_url.rsplit(":", 1)[1])
    _post(port, "/api/resume", {})
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        status = _status(fuzzed)
        if status["queue_depth"] == 0 and status["in_progress"] == 0:
            return True
        time.sleep(0.2)
    return False


def test_the_fuzzer_gets_no_500_no_slow_answer_and_no_worker_crash(fuzzed: FuzzedFleet) -> None:
    """Every route of the daemon's OpenAPI document, fuzzed: no 5xx, no undocumented status or body, no answer
    slower than ANSWER_MAX_S; then every job it got accepted runs, and the worker neither exits nor logs
    a crash. The number of requests and the slowest answer are printed."""
    schema = schemathesis.openapi.from_url(f"{fuzzed.base_url}/openapi.json")
    results = list(schema.get_all_operations())
    refused = [result.err() for result in results if isinstance(result, Err)]
    assert not refused, f"the document has invalid operations: {refused}"
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert len(operations) >= 20, [operation.label for operation in operations]
    for operation in operations:
        fuzz_route(fuzzed, operation)
    print(f"\nfuzzer: {fuzzed.requests} requests, slowest answer {fuzzed.slowest_s:.2f} s")
    assert _drained(fuzzed, 120), f"jobs still queued or running: {_status(fuzzed)}"
    worker = fuzzed.fleet.workers[1]
    assert worker.poll() is None, "the worker exited"
    log_text = fuzzed.fleet.log_of(1)  # the daemon started first: the worker is the second process
    crashed = [line for line in log_text.splitlines() if any(mark in line for mark in CRASHES)]
    assert not crashed, crashed[:3]
