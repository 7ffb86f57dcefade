"""The HTTP API against a real fleet: a demo tuning run by a real worker process on a real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from starlette.routing import Route

from service.api.app import create_app
from service.api.server import serve
from service.client.client import TunefleetClient
from service.core import keys
from service.core.errors import TunefleetError
from service.core.models.api import CaseRows, EventsPage, StatusView, TuningList
from service.core.models.status import CaseDetail
from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, write_tuning
from tests.support.redis_server import RedisServer, free_port

TOKEN = "tf-test-token-7f3a"
CASES = [
    case("pass"),
    case("one-apply", rules=["one-apply-a"]),
    case("flawed", flawed=True),
    case("void-out", voids={"nomem-1": 3}),
]


@pytest.fixture
async def ran(fleet: Fleet, tmp_path: Path) -> Fleet:
    """The four cases above run to their end by one worker process (which keeps running)."""
    await fleet.start_tuning(write_tuning(tmp_path / "tuning", CASES))
    fleet.start_worker(concurrency=4)
    await fleet.wait_finished(len(CASES))
    return fleet


@pytest.fixture
async def client(settings: FleetSettings) -> AsyncIterator[TunefleetClient]:
    async with TunefleetClient(settings) as opened:
        yield opened


def http(client: TunefleetClient, settings: FleetSettings) -> httpx.AsyncClient:
    """The app, open to read (tests/test_api_controls.py checks the read token)."""
    app = create_app(client, settings.model_copy(update={"api_public_read": True}))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://tunefleet")


async def test_status_counts_every_outcome_and_the_locks(ran: Fleet, client: TunefleetClient) -> None:
    """GET /api/status returns the live counters, which agree with the store, plus each tuning's lock."""
    async with http(client, ran.settings) as api:
        answer = await api.get("/api/status")
    assert answer.status_code == 200
    status = StatusView.model_validate_json(answer.content)
    rows = ran.results().values()
    (tuning,) = status.tunings
    for state in ("completed", "difficult", "failed"):
        assert getattr(tuning, state) == sum(r.state == state for r in rows) > 0
    assert (status.queue_depth, status.in_progress, tuning.running) == (0, 0, 0)
    assert [(lock.tuning, lock.held, lock.pending) for lock in status.locks] == [("t1", False, 0)]
    assert len(status.workers) == 1 and status.workers[0].slots == 4


async def test_tunings_are_listed_with_their_limits(ran: Fleet, client: TunefleetClient) -> None:
    """GET /api/tunings lists each registered tuning with its tries and adapter kinds."""
    async with http(client, ran.settings) as api:
        answer = await api.get("/api/tunings")
    listed = TuningList.model_validate_json(answer.content).tunings
    assert [(t.name, t.tries, t.mem_tries, t.runner) for t in listed] == [("t1", 3, 2, "demo")]


async def test_cases_are_filtered_by_state(ran: Fleet, client: TunefleetClient) -> None:
    """GET .../cases?state=X returns exactly the cases in state X; an unknown state is a 422 naming it."""
    expected = {"completed": {"pass", "one-apply"}, "difficult": {"flawed"}, "failed": {"void-out"}}
    async with http(client, ran.settings) as api:
        everything = CaseRows.model_validate_json((await api.get("/api/tunings/t1/cases")).content)
        assert {r.case for r in everything.cases} == {c["id"] for c in CASES}
        for state, ids in expected.items():
            rows = CaseRows.model_validate_json(
                (await api.get(f"/api/tunings/t1/cases?state={state}")).content
            )
            assert {r.case for r in rows.cases} == ids and rows.state == state
        unfinished = (await api.get("/api/tunings/t1/cases?state=unfinished")).json()
        assert unfinished["cases"] == []
        bad = await api.get("/api/tunings/t1/cases?state=lost")
        missing = await api.get("/api/tunings/nope/cases")
    assert bad.status_code == 422 and [f["field"] for f in bad.json()["fields"]] == ["state"]
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


async def test_case_detail_shows_every_try(ran: Fleet, client: TunefleetClient) -> None:
    """GET .../cases/{case} shows each attempt's verdict, rubric, improvements, apply and version."""
    async with http(client, ran.settings) as api:
        answer = await api.get("/api/tunings/t1/cases/one-apply")
        unknown = await api.get("/api/tunings/t1/cases/nobody")
        unsafe = await api.get("/api/tunings/t1/cases/..%2Fetc")
    detail = CaseDetail.model_validate_json(answer.content)
    assert [(a.phase, a.folder) for a in detail.attempts] == [("nomem", "1"), ("nomem", "2"), ("mem", "1")]
    first, second, memory = detail.attempts
    assert first.feedback is not None and first.feedback.verdict == "fail"
    assert set(first.feedback.rubric) == {"correct", "brief"} and first.feedback.prose()
    assert first.apply is not None and first.apply.version is not None
    assert first.run is not None and second.run is not None and second.run.version == first.apply.version
    assert second.feedback is not None and second.feedback.done and second.feedback.summary
    assert memory.run is not None and memory.run.memory_in and memory.run.output.usage.input_tokens > 0
    assert detail.result is not None and detail.result["state"] == "completed"
    assert unknown.status_code == 404 and unsafe.status_code in (404, 422)


async def test_events_page_through_the_stream(ran: Fleet, client: TunefleetClient) -> None:
    """GET /api/events gives the latest events, and paging with `after` visits every entry once, in order."""
    every_id = [entry[0].decode() for entry in await client.redis.xrange(keys.events())]
    async with http(client, ran.settings) as api:
        latest = EventsPage.model_validate_json((await api.get("/api/events?limit=5")).content)
        assert [e.id for e in latest.events] == every_id[-5:] and latest.last_id == every_id[-1]
        seen: list[str] = []
        after = "0"
        while True:
            page = EventsPage.model_validate_json(
                (await api.get(f"/api/events?after={after}&limit=7")).content
            )
            if not page.events:
                break
            seen += [e.id for e in page.events]
            assert page.last_id is not None
            after = page.last_id
        bad = await api.get("/api/events?after=yesterday&limit=0")
    assert seen == every_id and len(seen) > 7
    assert page.last_id == every_id[-1]
    assert bad.status_code == 422 and {f["field"] for f in bad.json()["fields"]} == {"after", "limit"}


async def test_submitting_needs_a_configured_token(ran: Fleet, client: TunefleetClient) -> None:
    """POST .../cases answers 503 while the fleet has no api_token, whatever the request carries."""
    async with http(client, ran.settings) as api:
        answer = await api.post(
            "/api/tunings/t1/cases", json=case("late"), headers={"Authorization": f"Bearer {TOKEN}"}
        )
    assert answer.status_code == 503 and "api_token" in answer.json()["error"]


async def test_submitting_checks_the_token_and_the_case(
    ran: Fleet, client: TunefleetClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """POST .../cases: 401 without or with a wrong token, 422 naming the bad field, 201 then a real run."""
    settings = ran.settings.model_copy(update={"api_token": SecretStr(TOKEN)})
    good = {"Authorization": f"Bearer {TOKEN}"}
    async with http(client, settings) as api:
        bare = await api.post("/api/tunings/t1/cases", json=case("late"))
        wrong = await api.post(
            "/api/tunings/t1/cases", json=case("late"), headers={"Authorization": "Bearer x"}
        )
        bad_case: dict[str, Any] = {**case("late"), "rubric": []}
        invalid = await api.post("/api/tunings/t1/cases", json=bad_case, headers=good)
        not_json = await api.post("/api/tunings/t1/cases", content=b"{", headers=good)
        created = await api.post("/api/tunings/t1/cases", json=case("late"), headers=good)
        again = await api.post("/api/tunings/t1/cases", json=case("late"), headers=good)
        unknown = await api.post("/api/tunings/nope/cases", json=case("late"), headers=good)
    assert bare.status_code == wrong.status_code == 401
    assert bare.headers["www-authenticate"] == "Bearer"
    assert invalid.status_code == 422 and [f["field"] for f in invalid.json()["fields"]] == ["rubric"]
    assert not_json.status_code == 422 and not_json.json()["fields"][0]["field"] == "(body)"
    assert created.status_code == 201 and created.json() == {
        "tuning": "t1",
        "case": "late",
        "rev": 1,
        "enqueued": True,
    }
    assert again.status_code == 200 and again.json()["enqueued"] is False
    assert unknown.status_code == 404
    rows = await ran.wait_finished(len(CASES) + 1)
    assert rows["late"].state == "completed"
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err


async def test_openapi_describes_every_route(ran: Fleet, client: TunefleetClient) -> None:
    """GET /openapi.json is an OpenAPI 3.1 document naming every route, whose every $ref resolves."""
    app = create_app(client, ran.settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as api:
        doc = (await api.get("/openapi.json")).json()
    routes = {(r.path, m.lower()) for r in app.routes if isinstance(r, Route) for m in r.methods or ()}
    described = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert doc["openapi"] == "3.1.0"
    assert {(p, m) for p, m in routes if m != "head"} == described
    refs = set(_refs(doc))
    assert refs and refs <= {f"#/components/schemas/{name}" for name in doc["components"]["schemas"]}
    submit = doc["paths"]["/api/tunings/{tuning}/cases"]["post"]
    assert submit["security"] == [{"bearer": []}] and {"201", "401", "422", "503"} <= set(submit["responses"])
    assert {"Case", "StatusView", "CaseDetail", "EventsPage"} <= set(doc["components"]["schemas"])


def _refs(node: Any) -> list[str]:
    """Every `$ref` in a JSON document."""
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


async def test_status_is_503_while_redis_is_down(
    settings: FleetSettings, client: TunefleetClient, redis_server: RedisServer
) -> None:
    """With Redis gone, /api/status answers 503 and /metrics still answers, with redis_up 0."""
    redis_server.stop()
    async with http(client, settings) as api:
        status = await api.get("/api/status")
        metrics = await api.get("/metrics")
    assert status.status_code == 503 and "Redis" in status.json()["error"]
    assert metrics.status_code == 200 and "tunefleet_redis_up 0.0" in metrics.text


async def test_serve_listens_until_stopped(settings: FleetSettings, client: TunefleetClient) -> None:
    """serve() answers on api_host:api_port, refuses a taken port by name, and returns when stopped."""
    port = free_port()
    on_port = settings.model_copy(update={"api_port": port, "api_public_read": True})
    stopping = asyncio.Event()
    task = asyncio.create_task(serve(client, on_port, stopping))
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as web:

        async def answers() -> bool:
            try:
                return (await web.get("/api/status")).status_code == 200
            except httpx.TransportError:
                return False

        for _ in range(100):
            if await answers():
                break
            await asyncio.sleep(0.05)
        page = await web.get("/")
        with pytest.raises(TunefleetError, match=f"127.0.0.1:{port}"):
            await serve(client, on_port, asyncio.Event())
        stopping.set()
        await asyncio.wait_for(task, 10)
        assert not await answers()
    assert page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
