"""The goal endpoints of the HTTP API (service.api.app registers them with the others):

    POST /api/goals                  start a goal (a GoalSpec as JSON; bearer token)
    GET  /api/goals                  every goal's summary (the Redis hash `tf:goals`)
    GET  /api/goals/{goal}           one goal: its live summary and its state (GOAL_STATE.json)
    GET  /api/goals/{goal}/result    GOAL_RESULT.md, as text/markdown
    POST /api/goals/{goal}/cancel    cancel a goal (bearer token)

A goal started over HTTP may not bring agents or a workspace of its own: its agents are its tuning's
(registered by an operator) or the demo agents, and its workspace starts empty. A spec that names a
command or llm agent or a server folder is refused (422), since the token would otherwise let a caller
run any command on the workers, read any folder of the daemon's machine or send a key from the
workers' environment to a server of its choosing; such goals start from the CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response

from service.api import http
from service.api.http import Endpoint, Guard, HttpError, json_response, off_loop, read_model_body, slug_param
from service.client.client import TunefleetClient
from service.core import keys
from service.core.errors import ConfigError
from service.core.models.api import FieldError
from service.core.models.tuning import DemoAdapter
from service.kinds.goals.errors import GoalBusyError, GoalConflictError, UnknownGoalError
from service.kinds.goals.models import GoalSpec, GoalStatus
from service.kinds.goals.spec import resolve_limits
from service.kinds.goals.state import GoalState, GoalSummary

T = TypeVar("T")


GOALS = "/api/goals"
GOAL = GOALS + "/{goal}"
QUEUED_NOTE = "queued: no worker has started it yet"


class GoalList(BaseModel):
    """Every goal as the fleet lists it, by id."""

    goals: list[GoalSummary]


class GoalDetail(BaseModel):
    """One goal: what Redis says of it now (step, worker) and its durable state."""

    id: str
    status: GoalStatus
    summary: GoalSummary | None = Field(
        default=None, description="The live summary (step, worker); None when Redis has none."
    )
    state: GoalState | None = Field(
        default=None, description="GOAL_STATE.json; None while the goal is queued for its first start."
    )
    note: str | None = Field(default=None, description="Why `state` is None.")


class GoalCancelled(BaseModel):
    """The answer to a cancel: the goal's step stops within a poll and it ends `cancelled`."""

    id: str
    cancelling: bool = True


def http_refusals(spec: GoalSpec) -> list[FieldError]:
    """What a spec submitted over HTTP may not hold (see the module's docstring)."""
    refused = []
    for role in ("runner", "analyzer"):
        adapter = getattr(spec, role)
        if adapter is not None and not isinstance(adapter, DemoAdapter):
            message = f"a goal started over HTTP takes its {role} from its tuning or demo, not {adapter.kind}"
            refused.append(FieldError(field=role, message=message))
        elif adapter is not None and adapter.outage_file is not None:
            message = (
                "a goal started over HTTP names no outage file: whether a path exists on the workers is "
                "theirs to know; start it from the CLI to simulate an outage"
            )
            refused.append(FieldError(field=f"{role}.outage_file", message=message))
    if spec.workspace is not None:
        message = "a goal started over HTTP starts with an empty workspace; start it from the CLI to copy one"
        refused.append(FieldError(field="workspace", message=message))
    return refused


class GoalApi(http.KindRoutes):
    """The goal handlers."""

    def endpoints(self) -> list[Endpoint]:
        E = Endpoint  # noqa: N806 (a table reads better with a short name)
        errors = (401, 404, 409, 413, 422, 503)
        cancel_errors = (401, 404, 409, 422, 503)
        return [
            E("GET", GOALS, self.list_goals, "Every goal's summary", GoalList, (503,)),
            E("GET", GOAL, self.goal, "A goal's summary and state", GoalDetail, (404, 422)),
            E("GET", GOAL + "/result", self.result, "A goal's GOAL_RESULT.md", "text/markdown", (404, 422)),
            E("POST", GOALS, self.start, "Start a goal", GoalSummary, errors, body=GoalSpec),
            E("POST", GOAL + "/cancel", self.cancel, "Cancel a goal", GoalCancelled, cancel_errors),
        ]

    async def _read(self, read: Callable[[str], T], goal_id: str) -> T:
        """A read of the goal's files (off the event loop); 404 for a goal the store does not hold."""
        return await off_loop(lambda: read(goal_id), UnknownGoalError, f"no goal {goal_id!r}")

    async def list_goals(self, request: Request) -> Response:
        return json_response(GoalList(goals=await self._client.goals.summaries()))

    async def goal(self, request: Request) -> Response:
        goal_id = slug_param(request, "goal")
        state = await self._read(self._client.goals.state, goal_id)
        raw = await self._client.redis.hget(keys.goals(), goal_id)  # type: ignore[misc]
        summary = GoalSummary.parse(raw)
        status = state.status if state is not None else summary.status if summary is not None else "queued"
        note = None if state is not None else QUEUED_NOTE
        return json_response(GoalDetail(id=goal_id, status=status, summary=summary, state=state, note=note))

    async def result(self, request: Request) -> Response:
        goal_id = slug_param(request, "goal")
        text = await self._read(self._client.goals.result_markdown, goal_id)
        return Response(text, media_type="text/markdown; charset=utf-8")

    async def start(self, request: Request) -> Response:
        self._guard.write(request)
        spec = await read_model_body(request, GoalSpec, "a goal spec", "invalid goal spec")
        refused = http_refusals(spec)
        if refused:
            raise HttpError(422, "goal spec refused over HTTP", refused)
        try:
            resolve_limits(spec, self._client.settings)
        except ConfigError as exc:
            raise HttpError(422, str(exc)) from None
        try:
            summary = await self._client.goals.start(spec)
        except GoalConflictError as exc:
            raise HttpError(409, str(exc)) from None
        except ConfigError as exc:  # an unknown tuning, an argv the goal steps cannot render
            raise HttpError(422, str(exc)) from None
        return json_response(summary, 201 if summary.status == "queued" else 200)

    async def cancel(self, request: Request) -> Response:
        self._guard.write(request)
        goal_id = slug_param(request, "goal")
        try:
            cancelling = await http.found(
                self._client.goals.cancel(goal_id), UnknownGoalError, f"no goal {goal_id!r}"
            )
        except GoalBusyError as exc:
            raise HttpError(503, str(exc)) from None
        if not cancelling:
            raise HttpError(409, f"goal {goal_id!r} has ended already: nothing to cancel")
        return json_response(GoalCancelled(id=goal_id))


def endpoints(client: TunefleetClient, guard: Guard) -> list[Endpoint]:
    """The goal kind's routes (service.core.kinds: the API takes them from every kind's `api`)."""
    return GoalApi(client, guard).endpoints()
