"""The echo kind's one route:

GET /api/echo/{tuning}/{echo}    the job's result (404 until it has one)
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from service.api.http import Endpoint, Guard, HttpError, json_response, off_loop, slug_param
from service.client.client import TunefleetClient
from tests.kinds.echo.service.models import EchoResult
from tests.kinds.echo.service.store import EchoStore


def endpoints(client: TunefleetClient, guard: Guard) -> list[Endpoint]:
    """The echo kind's routes (the API takes them from every kind's `api` module)."""

    async def result(request: Request) -> Response:
        found = EchoStore(client.store, slug_param(request, "tuning"), slug_param(request, "echo"))
        ended = await off_loop(found.result, LookupError)
        if ended is None:
            raise HttpError(404, "the echo job has not ended")
        return json_response(ended)

    return [
        Endpoint(
            "GET", "/api/echo/{tuning}/{echo}", result, "An echo job's result", EchoResult, (401, 404, 422)
        )
    ]
