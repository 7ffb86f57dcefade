"""The event contract: every kind the code emits is a member of EventKind and every member is emitted;
the sink refuses any other kind; `step_finished` has one shape for cases and goals; the front ends
(metrics, watch, the dashboard's JavaScript) take kinds from the contract, never from a literal. Each
checker is proven on a planted mistake."""

from __future__ import annotations

import asyncio
import gc
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.exceptions import RedisError

from service.api.app import create_app
from service.api.contract import CONTRACT_PATH, event_fields
from service.client.client import TunefleetClient
from service.core import keys
from service.core.errors import EventDataError, UnknownEventKindError
from service.core.events import EventSink
from service.core.models.events import CASE_ENDS, LOGGED_AT_DEBUG, EventKind, event_of
from service.core.settings import FleetSettings
from service.kinds.goals.models import GOAL_ENDS
from service.kinds.registry import counter_rules
from tests.support.events import emit_sites, js_kind_literals, kind_literals
from tests.support.fleet import Fleet, case, wait_until, write_tuning
from tests.support.imports import module_sources
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "service" / "dashboard"
PLANTED = """

async def planted(case_run, sink, state):
    await case_run.emit("case_exploded")
    await sink.emit(f"case_{state}", "t1")
    await case_run.emit(EventKind.CASE_EXPLODED)
"""


@pytest.fixture
async def client(settings: FleetSettings) -> AsyncIterator[TunefleetClient]:
    async with TunefleetClient(settings) as opened:
        yield opened


def test_every_kind_the_code_emits_is_in_the_contract() -> None:
    """No emit site in service/ or workers/ gives text for its kind or names a member the enum lacks, and
    the producers (core, client, daemon, workers, and the test-only kinds of tests/kinds, which use the
    `job_*` kinds a kind without its own has) name every member: the contract has no dead kind."""
    named, outside = emit_sites(module_sources(ROOT, ("service", "workers", "tests/kinds")))
    assert outside == []
    assert named == {kind.value for kind in EventKind}


def test_a_planted_unknown_kind_is_caught() -> None:
    """An emit site that names its kind by string, by f-string or by a member the enum lacks is reported."""
    sources = module_sources(ROOT)
    sources["workers.kinds.cases.loop"] += PLANTED
    _, outside = emit_sites(sources)
    assert [site.split(": ", 1)[1] for site in outside] == [
        "'case_exploded'",
        "f'case_{state}'",
        "EventKind.CASE_EXPLODED",
    ]
    assert all(site.startswith("workers.kinds.cases.loop:") for site in outside)


def test_no_front_end_or_worker_matches_a_kind_by_string() -> None:
    """No module compares an event's kind with a string or keeps a table keyed by kind strings; planted
    ones are caught."""
    sources = module_sources(ROOT)
    assert kind_literals(sources) == []
    sources["service.metrics"] += '\n\ndef planted(event):\n    return event.kind in ("step_finished", "x")\n'
    sources["service.watch.fmt"] += '\nPLANTED = {"case_failed": "red", "goal_failed": "red"}\n'
    found = [site.split(": ", 1)[1] for site in kind_literals(sources)]
    assert found == ["'step_finished'", "'case_failed'", "'goal_failed'"]


def test_the_dashboard_names_no_kind_by_string() -> None:
    """The dashboard's JavaScript holds no event kind as a literal (it imports them); a planted one is
    caught."""
    scripts = sorted(DASHBOARD.glob("*.js"))
    assert len(scripts) >= 4
    assert {p.name: js_kind_literals(p.read_text()) for p in scripts} == {p.name: [] for p in scripts}
    assert js_kind_literals('if (event.kind === "case_failed") { warn(`goal_failed`); }') == [
        "case_failed",
        "goal_failed",
    ]


async def test_the_dashboard_contract_module_is_the_enum(
    client: TunefleetClient, settings: FleetSettings
) -> None:
    """The served contract.js (no token needed, as the static files) exports exactly the enum's kinds,
    each kind's fields (tests/test_event_payloads.py checks them against the payload models) and the case
    and goal ends, and the dashboard imports it."""
    app = create_app(client, settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as web:
        answer = await web.get(CONTRACT_PATH)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/javascript")
    exports = {
        name: json.loads(value)
        for name, value in re.findall(r"^export const (\w+) = Object\.freeze\((.*)\);$", answer.text, re.M)
    }
    assert exports == {
        "EVENT_KINDS": {kind.name: kind.value for kind in EventKind},
        "EVENT_FIELDS": event_fields(),
        "CASE_ENDS": {state: kind.value for state, kind in CASE_ENDS.items()},
        "GOAL_ENDS": {status: kind.value for status, kind in GOAL_ENDS.items()},
    }
    assert 'from "./contract.js"' in (DASHBOARD / "app.js").read_text()


async def test_the_sink_refuses_an_unknown_kind_and_writes_nothing(
    client: TunefleetClient, settings: FleetSettings
) -> None:
    """EventSink.emit and emit_many refuse a kind outside the contract, naming it, before any write: no
    stream entry, no counter, no events.jsonl line; a known kind goes through."""
    sink = EventSink(client.redis, client.store, settings.events_max, counter_rules(settings))
    with pytest.raises(UnknownEventKindError, match="'case_exploded' is not in the contract"):
        await sink.emit("case_exploded", "t1", case="c1", rev=1)  # type: ignore[arg-type]
    with pytest.raises(UnknownEventKindError, match="'case_exploded' is not in the contract"):
        await sink.emit_many("case_exploded", "t1", [{"case": "c1", "rev": 1}])  # type: ignore[arg-type]
    assert await client.redis.xlen(keys.events()) == 0
    assert await client.redis.exists(keys.stats("t1")) == 0
    assert not client.store.tuning("t1").events_file.exists()
    await sink.emit(EventKind.CASE_QUEUED, "t1", case="c1", rev=1)
    assert await client.redis.xlen(keys.events()) == 1


async def test_an_event_whose_line_cannot_be_written_never_reaches_redis(
    client: TunefleetClient, settings: FleetSettings
) -> None:
    """The sink queues an event's line and its script call in one loop turn: when the line cannot be
    written (the events file is a folder here), the emit fails with the OSError and Redis gets no
    stream entry and no counter, while another tuning's event of the same turn goes through whole."""
    sink = EventSink(client.redis, client.store, settings.events_max, counter_rules(settings))
    client.store.tuning("t1").events_file.mkdir(parents=True)
    failed, fine = await asyncio.gather(
        sink.emit(EventKind.CASE_QUEUED, "t1", case="c1", rev=1),
        sink.emit(EventKind.CASE_QUEUED, "t2", case="c2", rev=1),
        return_exceptions=True,
    )
    assert isinstance(failed, IsADirectoryError), failed
    assert not isinstance(fine, BaseException)
    entries = await client.redis.xrange(keys.events())
    assert [json.loads(fields[b"event"])["tuning"] for _, fields in entries] == ["t2"]
    assert await client.redis.exists(keys.stats("t1")) == 0
    assert await client.redis.exists(keys.stats("t2")) == 1
    assert json.loads(client.store.tuning("t2").events_file.read_text())["case"] == "c2"


async def test_an_abandoned_event_leaves_no_unretrieved_error(
    client: TunefleetClient, settings: FleetSettings, redis_server: RedisServer
) -> None:
    """An event that nobody will wait for (an earlier event of its case failed: Redis went away) takes
    its own error as seen: the loop reports no "exception was never retrieved" once it is gone; the
    earlier one's error reaches its caller, and both lines are in the events file."""
    sink = EventSink(client.redis, client.store, settings.events_max, counter_rules(settings))
    reported: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: reported.append(context))
    redis_server.stop()
    first = sink.queue(EventKind.CASE_QUEUED, "t1", case="c1", rev=1)
    second = sink.queue(EventKind.CASE_QUEUED, "t1", case="c2", rev=1)
    with pytest.raises(RedisError):
        await first.sent()
    second.abandon()
    while not second.sent_call.done():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)  # one loop turn: the callbacks `abandon` added run
    del first, second
    gc.collect()
    assert reported == []
    lines = client.store.tuning("t1").events_file.read_text().splitlines()
    assert [json.loads(line)["case"] for line in lines] == ["c1", "c2"]


@pytest.mark.parametrize("level", ["info", "debug"])
async def test_a_workers_log_has_a_line_per_step_only_at_debug(
    fleet: Fleet, tmp_path: Path, level: str
) -> None:
    """At the default level a worker logs a case's start and end but no line per step (`step_started`,
    `step_finished`); at `debug` it logs those too. The events file has every event either way."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c1")]))
    fleet.start_worker(concurrency=1, TUNEFLEET_LOG_LEVEL=level)

    def logged() -> list[str]:
        return [json.loads(line)["event"] for line in fleet.log_of(0).splitlines() if line.startswith("{")]

    await wait_until(lambda: EventKind.CASE_COMPLETED.value in logged(), 30, "the case's end in the log")
    in_log = set(logged())
    assert {EventKind.CASE_STARTED.value, EventKind.CASE_COMPLETED.value} <= in_log
    per_step = {kind.value for kind in LOGGED_AT_DEBUG}
    assert (per_step <= in_log) if level == "debug" else not (per_step & in_log)
    assert per_step <= {event["kind"] for event in fleet.events()}


def test_a_finished_step_has_one_shape_for_every_job() -> None:
    """A step_finished event without its step or its duration_ms is refused, whatever the job; a goal's
    finished step is accepted with its step, iteration and duration_ms at the top level."""
    now = datetime.now(UTC)
    with pytest.raises(EventDataError, match="duration_ms"):
        event_of(dict(at=now, kind=EventKind.STEP_FINISHED, tuning="t1", case="c1", step="run"))
    with pytest.raises(EventDataError, match="duration_ms"):
        event_of(dict(at=now, kind=EventKind.STEP_FINISHED, tuning="t1", case="c1", duration_ms=5))
    finished = event_of(dict(at=now, kind=EventKind.STEP_FINISHED, tuning="", goal="g1", iteration=2,
                             step="work", duration_ms=1250))  # fmt: skip
    assert json.loads(finished.line()) == {
        "at": finished.model_dump(mode="json")["at"],
        "kind": "step_finished",
        "tuning": "",
        "goal": "g1",
        "iteration": 2,
        "step": "work",
        "duration_ms": 1250,
    }
