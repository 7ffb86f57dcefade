"""The HTTP API's guard and controls (issue 12, item 13): reads need a token unless `api_public_read`,
pause, resume, cancel and all-or-nothing batch submission over HTTP, paging of the case list, and one
size limit (`case_max_bytes`) for `submit` and HTTP alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from service.api.app import create_app
from service.client.client import TunefleetClient
from service.core import keys
from service.core.models.api import BatchRefused, BatchResult, Cancelled, CaseRows
from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, write_tuning
from tests.support.redis_server import RedisServer

WRITE = "tf-write-token-51c2"
READ = "tf-read-token-9e04"
READS = [
    "/api/status",
    "/api/tunings",
    "/api/tunings/t1/cases",
    "/api/tunings/t1/cases/c0",
    "/api/events",
    "/metrics",
]


@pytest.fixture
async def client(settings: FleetSettings) -> AsyncIterator[TunefleetClient]:
    async with TunefleetClient(settings) as opened:
        yield opened


@pytest.fixture
async def queued(fleet: Fleet, tmp_path: Path) -> Fleet:
    """Tuning t1 with five cases queued, and no worker to run them."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case(f"c{n}") for n in range(5)]))
    return fleet


def http(client: TunefleetClient, settings: FleetSettings, **update: Any) -> httpx.AsyncClient:
    app = create_app(client, settings.model_copy(update=update))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://tunefleet")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


TOKENS = {"api_token": SecretStr(WRITE), "api_read_token": SecretStr(READ)}


async def test_reads_need_a_token(queued: Fleet, client: TunefleetClient) -> None:
    """Every read, /metrics and the dashboard answer 401 without a token or with a wrong one, and 200 with
    the read or the write token; /openapi.json stays public."""
    async with http(client, queued.settings, **TOKENS) as api:
        for path in [*READS, "/"]:
            bare = await api.get(path)
            wrong = await api.get(path, headers=bearer("nope"))
            assert (bare.status_code, wrong.status_code) == (401, 401), path
            assert bare.headers["www-authenticate"] == "Bearer"
        for path in READS:
            for token in (READ, WRITE):
                assert (await api.get(path, headers=bearer(token))).status_code == 200, path
        assert (await api.get("/openapi.json")).status_code == 200


async def test_reads_are_refused_when_no_token_is_configured(queued: Fleet, client: TunefleetClient) -> None:
    """With no token configured and api_public_read off, reads answer 503 naming the settings to set."""
    async with http(client, queued.settings) as api:
        for path in [*READS, "/"]:
            answer = await api.get(path)
            assert answer.status_code == 503, path
            assert "api_public_read" in answer.json()["error"]


async def test_public_read_opens_reads_but_not_writes(queued: Fleet, client: TunefleetClient) -> None:
    """With api_public_read on, reads need no token, and writes still need the write token."""
    async with http(client, queued.settings, api_public_read=True, **TOKENS) as api:
        for path in [*READS, "/"]:
            assert (await api.get(path)).status_code == 200, path
        assert (await api.post("/api/pause")).status_code == 401
        assert (await api.post("/api/pause", headers=bearer(READ))).status_code == 401
    assert not await client.redis.exists(keys.paused())


async def test_the_dashboard_keeps_a_read_token_as_a_cookie(queued: Fleet, client: TunefleetClient) -> None:
    """`/?token=READ` sets an HttpOnly cookie and goes back to `/`; the cookie then reads but never writes,
    and a wrong token sets none."""
    async with http(client, queued.settings, **TOKENS) as api:
        wrong = await api.get("/?token=nope")
        assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
        kept = await api.get(f"/?token={READ}")
        assert kept.status_code == 303 and kept.headers["location"] == "/"
        cookie = kept.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert (await api.get("/")).status_code == 200
        assert (await api.get("/api/status")).status_code == 200
        assert (await api.post("/api/pause")).status_code == 401


async def test_pause_and_resume_over_http(queued: Fleet, client: TunefleetClient) -> None:
    """POST /api/pause pauses the fleet and POST /api/resume resumes it; a tuning not held is not released."""
    async with http(client, queued.settings, **TOKENS) as api:
        paused = await api.post("/api/pause", headers=bearer(WRITE))
        assert paused.json() == {"paused": True} and await client.redis.exists(keys.paused())
        resumed = await api.post("/api/resume", headers=bearer(WRITE))
        assert resumed.json() == {"paused": False} and not await client.redis.exists(keys.paused())
        released = await api.post("/api/tunings/t1/resume", headers=bearer(WRITE))
    assert released.json() == {"tuning": "t1", "released": False}


async def test_cancel_over_http(queued: Fleet, client: TunefleetClient) -> None:
    """POST .../cases/{case}/cancel ends that queued case cancelled, an unknown case is a 404, and
    POST /api/tunings/{tuning}/cancel cancels every other unfinished case."""
    async with http(client, queued.settings, **TOKENS) as api:
        one = await api.post("/api/tunings/t1/cases/c0/cancel", headers=bearer(WRITE))
        unknown = await api.post("/api/tunings/t1/cases/nobody/cancel", headers=bearer(WRITE))
        assert {r.case: r.state for r in queued.results().values() if r.state != "unfinished"} == {
            "c0": "cancelled"
        }
        rest = await api.post("/api/tunings/t1/cancel", headers=bearer(WRITE))
    assert Cancelled.model_validate_json(one.content).cancelled == ["case:t1:c0:1"]
    assert unknown.status_code == 404 and "nobody" in unknown.json()["error"]
    assert sorted(Cancelled.model_validate_json(rest.content).cancelled) == [
        f"case:t1:c{n}:1" for n in range(1, 5)
    ]
    assert {r.state for r in queued.results().values()} == {"cancelled"}


async def test_a_batch_is_all_or_nothing(
    queued: Fleet, client: TunefleetClient, redis_server: RedisServer
) -> None:
    """A batch with invalid items is refused whole (422), each invalid item named by index, nothing queued;
    the valid batch is then enqueued (201), and sent again it is already known (200)."""
    depth = redis_server.zcard(queued.settings.queue)
    good = [case("b0"), case("b1"), case("b2")]
    bad = [good[0], {**case("b1"), "rubric": []}, good[0], "not a case"]
    async with http(client, queued.settings, **TOKENS) as api:
        refused = await api.post("/api/tunings/t1/batch", json=bad, headers=bearer(WRITE))
        assert refused.status_code == 422
        items = BatchRefused.model_validate_json(refused.content).items
        assert [(i.index, i.case) for i in items] == [(1, "b1"), (2, "b0"), (3, None)]
        assert [f.field for f in items[0].fields] == ["rubric"]
        assert redis_server.zcard(queued.settings.queue) == depth
        assert not (queued.settings.store / "tunings" / "t1" / "cases" / "b0").exists()
        created = await api.post("/api/tunings/t1/batch", json=good, headers=bearer(WRITE))
        again = await api.post("/api/tunings/t1/batch", json=good, headers=bearer(WRITE))
        not_array = await api.post("/api/tunings/t1/batch", json={"id": "b9"}, headers=bearer(WRITE))
    assert created.status_code == 201
    result = BatchResult.model_validate_json(created.content)
    assert (result.enqueued, result.already_known) == (3, 0)
    assert [(i.index, i.case, i.enqueued) for i in result.cases] == [
        (0, "b0", True),
        (1, "b1", True),
        (2, "b2", True),
    ]
    assert again.status_code == 200 and BatchResult.model_validate_json(again.content).already_known == 3
    assert not_array.status_code == 422
    assert redis_server.zcard(queued.settings.queue) == depth + 3


async def test_the_case_list_pages(queued: Fleet, client: TunefleetClient) -> None:
    """GET .../cases?offset&limit gives pages that visit every case once, with the total and next offset."""
    seen: list[str] = []
    offset: int | None = 0
    async with http(client, queued.settings, **TOKENS) as api:
        while offset is not None:
            answer = await api.get(f"/api/tunings/t1/cases?offset={offset}&limit=2", headers=bearer(READ))
            page = CaseRows.model_validate_json(answer.content)
            assert page.total == 5 and page.offset == offset and len(page.cases) <= 2
            seen += [row.case for row in page.cases]
            offset = page.next_offset
        too_big = await api.get("/api/tunings/t1/cases?limit=0", headers=bearer(READ))
    assert seen == [f"c{n}" for n in range(5)]
    assert too_big.status_code == 422


async def test_one_size_limit_for_submit_and_http(
    queued: Fleet, client: TunefleetClient, tmp_path: Path
) -> None:
    """`case_max_bytes` refuses a larger case file in `submit` by name and a larger body over HTTP (413),
    and lets a smaller case through both."""
    settings = queued.settings.model_copy(update={"case_max_bytes": 4096, **TOKENS})
    small = {**case("small"), "input": "x" * 2000}
    large = {**case("large"), "input": "x" * 5000}
    folder = tmp_path / "sized"
    write_tuning(folder, [small, large])
    async with TunefleetClient(settings) as sized:
        report = await sized.submit_path("t1", folder / "cases")
    assert report.accepted == ["small@1"]
    [refusal] = report.refused
    assert refusal.file.endswith("large.yaml") and "case_max_bytes" in refusal.error
    async with http(client, settings) as api:
        refused = await api.post("/api/tunings/t1/cases", json=large, headers=bearer(WRITE))
        batch = await api.post("/api/tunings/t1/batch", json=[small, large], headers=bearer(WRITE))
        taken = await api.post(
            "/api/tunings/t1/cases", json={**small, "id": "small-2"}, headers=bearer(WRITE)
        )
    assert refused.status_code == 413 and "case_max_bytes" in refused.json()["error"]
    assert batch.status_code == 422
    assert [i.index for i in BatchRefused.model_validate_json(batch.content).items] == [1]
    assert taken.status_code == 201


def test_the_api_listens_on_loopback_by_default() -> None:
    """Outside a container (no TUNEFLEET_API_HOST), the API listens on 127.0.0.1 only."""
    assert FleetSettings.model_fields["api_host"].default == "127.0.0.1"


async def test_openapi_describes_the_guard_and_the_controls(queued: Fleet, client: TunefleetClient) -> None:
    """/openapi.json lists the controls and the batch with the write token, the reads with the read token
    or its cookie, the batch's per-item refusal, and the case list's paging."""
    async with http(client, queued.settings) as api:
        doc = (await api.get("/openapi.json")).json()
    paths = doc["paths"]
    for path in (
        "/api/pause",
        "/api/resume",
        "/api/tunings/{tuning}/resume",
        "/api/tunings/{tuning}/cancel",
        "/api/tunings/{tuning}/cases/{case}/cancel",
        "/api/tunings/{tuning}/batch",
    ):
        assert paths[path]["post"]["security"] == [{"bearer": []}], path
    assert paths["/api/status"]["get"]["security"] == [{"bearer": []}, {"readCookie": []}]
    assert "security" not in paths["/openapi.json"]["get"]
    refused = paths["/api/tunings/{tuning}/batch"]["post"]["responses"]["422"]
    either = [s["$ref"].rsplit("/", 1)[1] for s in refused["content"]["application/json"]["schema"]["anyOf"]]
    assert either == ["BatchRefused", "ErrorBody"]  # items named one by one, or a body that is no batch
    listed = {p["name"] for p in paths["/api/tunings/{tuning}/cases"]["get"]["parameters"]}
    assert {"state", "offset", "limit"} <= listed
