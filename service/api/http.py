"""What every endpoint of the HTTP API (service.api.app) shares: the endpoint table's row, error answers,
request parsing, and who may call it.

Access has three levels. `public`: anyone (the OpenAPI document, static files, health). `read`: the
read token, or the write token, as a bearer token, or as the `tunefleet_read` cookie that opening the
dashboard as `/?token=…` sets; or anyone when `api_public_read` is on. `write`: the write token
(`api_token`) as a bearer token only, so a browser's cookie can never submit, pause or cancel.
"""

from __future__ import annotations

import hmac
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

from pydantic import BaseModel, SecretStr, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from service.core.models.api import ErrorBody, FieldError
from service.core.models.case import is_slug
from service.core.settings import FleetSettings
from service.core.validation import field_problems

if TYPE_CHECKING:
    from service.client.client import TunefleetClient

READ_COOKIE = "tunefleet_read"
Access = Literal["public", "read", "write"]
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]
MAX_BODY_BYTES = 1 << 20
"""The largest goal spec or evaluation request over HTTP (read_model_body); cases are held to the
`case_max_bytes` setting."""


class HttpError(Exception):
    """An error answer: its status code and body (and a challenge for 401)."""

    def __init__(self, status: int, error: str, fields: list[FieldError] | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.body = ErrorBody(error=error, fields=fields or [])
        self.headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}


@dataclass(frozen=True)
class Endpoint:
    """One route and its OpenAPI description. `answer` is a model (JSON) or a media type."""

    method: str
    path: str
    handler: Handler
    summary: str
    answer: type[BaseModel] | str
    errors: tuple[int, ...] = ()
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    access: Access = "read"


def json_response(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def field_errors(exc: ValidationError, prefix: str = "") -> list[FieldError]:
    return [
        FieldError(field=".".join([prefix, p.field]).strip(".") or "(body)", message=p.expected)
        for p in field_problems(exc, top="")
    ]


def parse_query(model: type[M], params: Mapping[str, str]) -> M:
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        raise HttpError(422, "invalid query", field_errors(exc)) from None


def slug_param(request: Request, name: str) -> str:
    value = str(request.path_params[name])
    if not is_slug(value):
        raise HttpError(422, f"invalid {name}", [FieldError(field=name, message="not a safe slug")])
    return value


async def read_body(request: Request, max_bytes: int, what: str) -> bytes:
    """The request's body, or 413 as soon as it passes `max_bytes` (the fleet's `case_max_bytes`)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise HttpError(413, f"{what} is at most {max_bytes} bytes (case_max_bytes)")
    return bytes(body)


async def read_model_body(
    request: Request, model: type[M], what: str, invalid: str, empty: bytes | None = None
) -> M:
    """The request's body (`what`, at most MAX_BODY_BYTES: else 413) validated as `model`, else 422
    `invalid` with one error per field; an empty body reads as `empty` when given."""
    body = await read_body(request, MAX_BODY_BYTES, what)
    if not body and empty is not None:
        body = empty
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise HttpError(422, invalid, field_errors(exc)) from None


async def off_loop(read: Callable[[], T], unknown: type[Exception], detail: str | None = None) -> T:
    """A blocking read of the store, run off the event loop; 404 when it raises `unknown` (a run the
    store does not hold), saying `detail` or else the error."""
    try:
        return await run_in_threadpool(read)
    except unknown as exc:
        raise HttpError(404, detail or str(exc)) from None


async def found(
    call: Awaitable[T], unknown: type[Exception] | tuple[type[Exception], ...], detail: str | None = None
) -> T:
    """What the fleet answered (`call`, awaited); 404 when it raises `unknown` (a thing the fleet does not
    hold), saying `detail` or else the error."""
    try:
        return await call
    except unknown as exc:
        raise HttpError(404, detail or str(exc)) from None


def _matches(given: str, token: SecretStr | None) -> bool:
    return token is not None and hmac.compare_digest(given.encode(), token.get_secret_value().encode())


def bearer(request: Request) -> str:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" else ""


class Guard:
    """Checks a request against an endpoint's access level, from the fleet's settings."""

    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings

    def check(self, request: Request, access: Access) -> None:
        if access == "read":
            self.read(request)
        elif access == "write":
            self.write(request)

    def read_tokens(self) -> list[SecretStr]:
        return [t for t in (self.settings.api_read_token, self.settings.api_token) if t is not None]

    def read(self, request: Request) -> None:
        if self.settings.api_public_read:
            return
        tokens = self.read_tokens()
        if not tokens:
            raise HttpError(
                503,
                "reading is disabled: the fleet has no api_read_token or api_token configured "
                "(or set api_public_read: true)",
            )
        given = [bearer(request), request.cookies.get(READ_COOKIE, "")]
        if not any(_matches(g, t) for g in given if g for t in tokens):
            raise HttpError(401, "a valid read token is required (Authorization: Bearer …, or /?token=…)")

    def write(self, request: Request) -> None:
        token = self.settings.api_token
        if token is None:
            raise HttpError(503, "writing is disabled: the fleet has no api_token configured")
        if not _matches(bearer(request), token):
            raise HttpError(401, "a valid bearer token is required")

    def cookie_token(self, given: str) -> None:
        """Whether a token offered as `/?token=…` may be kept as the read cookie: the read token only.
        The write token may read, but a browser never keeps it (403), so a page can never carry it."""
        if _matches(given, self.settings.api_token):
            raise HttpError(
                403,
                "the write token is never kept by a browser: open the dashboard with the read token "
                "(api_read_token)",
            )
        if not _matches(given, self.settings.api_read_token):
            raise HttpError(401, "that token may not read this fleet")

    def cookie_secure(self, request: Request) -> bool:
        """Whether the read cookie is `Secure` (setting `api_cookie_secure`): always, or when the request
        came over TLS, as its URL or a TLS-ending proxy's `X-Forwarded-Proto` says. A client that fakes
        the header only makes its own browser keep the cookie for https."""
        if self.settings.api_cookie_secure == "always":
            return True
        forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
        return request.url.scheme == "https" or forwarded == "https"


class KindRoutes(ABC):
    """A kind's route handlers (its `api` module's class), bound to the API's fleet client (which
    carries the fleet's settings) and access guard; `endpoints` lists them."""

    def __init__(self, client: TunefleetClient, guard: Guard) -> None:
        self._client = client
        self._guard = guard

    @abstractmethod
    def endpoints(self) -> list[Endpoint]:
        """The routes, each bound to its handler."""
