"""The goal endpoints of the HTTP API against a real fleet: a real worker process pursues the goals
started over HTTP, on a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from service.api.app import create_app
from service.client.client import TunefleetClient
from service.core.settings import FleetSettings
from service.kinds.goals.api import GoalCancelled, GoalDetail, GoalList
from service.kinds.goals.state import GoalSummary
from tests.support.fleet import Fleet, wait_until
from tests.support.goals import goal_state, wait_goal_ended, wait_goal_shown_ended

TOKEN = "tf-goal-token-19c4"
GOOD = {"Authorization": f"Bearer {TOKEN}"}


def spec(goal_id: str = "g1", **fields: Any) -> dict[str, Any]:
    return {"id": goal_id, "goal": f"Finish {goal_id}", "acceptance": ["every task is done"], **fields}


@pytest.fixture
async def api(settings: FleetSettings) -> AsyncIterator[httpx.AsyncClient]:
    """The API app of the fleet, with an api_token configured and reads open."""
    with_token = settings.model_copy(update={"api_token": SecretStr(TOKEN), "api_public_read": True})
    async with TunefleetClient(with_token) as client:
        app = create_app(client, with_token)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://tunefleet") as web:
            yield web


async def test_a_goal_started_over_http_runs_and_reads_back(fleet: Fleet, api: httpx.AsyncClient) -> None:
    """POST /api/goals queues the goal (201); a worker completes it; the list, the detail (iterations,
    review) and GOAL_RESULT.md show it."""
    created = await api.post("/api/goals", json=spec(demo={"complete_at": 2}), headers=GOOD)
    assert created.status_code == 201
    assert GoalSummary.model_validate_json(created.content).status == "queued"
    fleet.start_worker()
    await wait_goal_ended(fleet)
    await wait_goal_shown_ended(fleet)
    listed = GoalList.model_validate_json((await api.get("/api/goals")).content).goals
    assert [(s.id, s.status, s.iteration) for s in listed] == [("g1", "completed", 2)]
    detail = GoalDetail.model_validate_json((await api.get("/api/goals/g1")).content)
    assert detail.status == "completed" and detail.state is not None and detail.note is None
    reviews = [it.review.review for it in detail.state.iterations if it.review is not None]
    assert [(r.decision, r.complete) for r in reviews] == [("continue", False), ("complete", True)]
    assert reviews[0].remaining_work == ["continue the goal in iteration 2"]
    result = await api.get("/api/goals/g1/result")
    assert result.status_code == 200 and result.headers["content-type"].startswith("text/markdown")
    assert result.text.count("## Iteration ") == 2 and "Decision: complete" in result.text
    again = await api.post("/api/goals", json=spec(demo={"complete_at": 2}), headers=GOOD)
    other = await api.post("/api/goals", json=spec(goal="Something else"), headers=GOOD)
    assert again.status_code == 200 and again.json()["status"] == "completed"
    assert other.status_code == 409 and "different goal" in other.json()["error"]


async def test_starting_and_cancelling_need_the_token(
    settings: FleetSettings, api: httpx.AsyncClient
) -> None:
    """Without the token a start or a cancel is 401; with no token configured, 503; nothing is queued."""
    bare = await api.post("/api/goals", json=spec())
    wrong = await api.post("/api/goals", json=spec(), headers={"Authorization": "Bearer nope"})
    cancel = await api.post("/api/goals/g1/cancel")
    assert bare.status_code == wrong.status_code == cancel.status_code == 401
    assert bare.headers["www-authenticate"] == "Bearer"
    async with TunefleetClient(settings) as client:
        transport = httpx.ASGITransport(app=create_app(client, settings))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as open_api:
            disabled = await open_api.post("/api/goals", json=spec(), headers=GOOD)
    assert disabled.status_code == 503 and "api_token" in disabled.json()["error"]
    assert (await api.get("/api/goals")).json() == {"goals": []}


async def test_invalid_or_unsafe_specs_are_refused_by_field(api: httpx.AsyncClient) -> None:
    """A spec that does not validate, brings its own command agent or a server folder, or has
    contradicting limits is a 422 naming the field; an unknown tuning is a 404."""
    invalid = await api.post("/api/goals", json=spec(goal=""), headers=GOOD)
    command = {"kind": "command", "argv": ["sh", "-c", "id"]}
    unsafe = await api.post("/api/goals", json=spec(runner=command, workspace="/etc"), headers=GOOD)
    limits = await api.post(
        "/api/goals", json=spec(limits={"min_iterations": 3, "max_iterations": 2}), headers=GOOD
    )
    tuning = await api.post("/api/goals", json=spec(tuning="nope"), headers=GOOD)
    too_big = await api.post("/api/goals", content=b" " * (2 << 20), headers=GOOD)
    assert invalid.status_code == 422 and [f["field"] for f in invalid.json()["fields"]] == ["goal"]
    assert unsafe.status_code == 422 and [f["field"] for f in unsafe.json()["fields"]] == [
        "runner",
        "workspace",
    ]
    assert limits.status_code == 422 and "min_iterations" in limits.json()["error"]
    assert tuning.status_code == 404 and "nope" in tuning.json()["error"]
    assert too_big.status_code == 413
    assert (await api.get("/api/goals")).json() == {"goals": []}


async def test_a_queued_goal_an_unknown_goal_and_a_cancel(fleet: Fleet, api: httpx.AsyncClient) -> None:
    """A goal no worker has started answers 200 with no state and a note; an unknown one 404; a cancel
    of a running goal ends it `cancelled`, and a second cancel is a 409."""
    hang = {"hang": {"step": "work", "iteration": 1}}
    assert (await api.post("/api/goals", json=spec(demo=hang), headers=GOOD)).status_code == 201
    queued = GoalDetail.model_validate_json((await api.get("/api/goals/g1")).content)
    assert (queued.status, queued.state) == ("queued", None)
    assert queued.note == "queued: no worker has started it yet"
    unknown = await api.get("/api/goals/nobody")
    unknown_result = await api.get("/api/goals/nobody/result")
    unsafe = await api.get("/api/goals/..%2Fetc")
    assert unknown.status_code == unknown_result.status_code == 404 and "nobody" in unknown.json()["error"]
    assert unsafe.status_code in (404, 422)
    fleet.start_worker()

    def working() -> bool:
        state = goal_state(fleet)
        current = state.current() if state is not None else None
        return current is not None and current.status == "working"

    await wait_until(working, 30, "the goal to reach its work step")
    cancelled = await api.post("/api/goals/g1/cancel", headers=GOOD)
    assert cancelled.status_code == 200 and GoalCancelled.model_validate_json(cancelled.content).cancelling
    state = await wait_goal_ended(fleet)
    assert state.status == "cancelled" and state.completion is not None
    again = await api.post("/api/goals/g1/cancel", headers=GOOD)
    missing = await api.post("/api/goals/nobody/cancel", headers=GOOD)
    assert again.status_code == 409 and missing.status_code == 404


async def test_openapi_describes_the_goal_routes(api: httpx.AsyncClient) -> None:
    """The OpenAPI document has every goal route, with the write token on both writes, the read token on
    reads, and the models' schemas."""
    doc = (await api.get("/openapi.json")).json()
    paths = doc["paths"]
    assert set(paths["/api/goals"]) == {"get", "post"}
    assert paths["/api/goals"]["post"]["security"] == [{"bearer": []}]
    assert paths["/api/goals/{goal}/cancel"]["post"]["security"] == [{"bearer": []}]
    assert paths["/api/goals/{goal}"]["get"]["security"] == [
        {"bearer": []},
        {"readCookie": []},
    ]  # the read token
    assert "text/markdown" in paths["/api/goals/{goal}/result"]["get"]["responses"]["200"]["content"]
    models = {"GoalSpec", "GoalList", "GoalDetail", "GoalState", "GoalCancelled"}
    assert models <= set(doc["components"]["schemas"])
