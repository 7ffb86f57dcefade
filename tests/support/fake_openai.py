"""A real OpenAI-compatible Chat Completions server for the tests, on a free loopback port.

It serves `POST /v1/chat/completions` (starlette under uvicorn, in a thread of its own so that a test
may block or run a worker process meanwhile), records every request (headers, JSON body, arrival
time), and answers from a script the test plays: a completion with its usage, an error status with an
optional Retry-After, or a connection dropped in the middle of the answer. When the script is empty it
asks the test's `responder`, if any. Any answer may be delayed (`delay_s`); the server counts the
requests it is answering (`in_flight`) and the most there ever were at once (`max_in_flight`).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send


@dataclass(frozen=True)
class Reply:
    """A 200 chat completion whose message is `content`, with its usage."""

    content: str
    prompt_tokens: int = 100
    completion_tokens: int = 20
    delay_s: float = 0.0


@dataclass(frozen=True)
class Status:
    """An error answer: `code`, an OpenAI-style error body and, if given, a Retry-After header."""

    code: int
    retry_after: str | None = None
    message: str = "scripted error"
    delay_s: float = 0.0


@dataclass(frozen=True)
class Drop:
    """Start a 200 answer, then close the connection before its body is complete."""

    delay_s: float = 0.0


Scripted = Reply | Status | Drop
Responder = Callable[[dict[str, Any]], Scripted]


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it."""

    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)

    @property
    def text(self) -> str:
        """Every message's content, joined."""
        return "\n".join(str(m.get("content", "")) for m in self.body.get("messages", []))

    @property
    def format_type(self) -> str:
        return str(self.body.get("response_format", {}).get("type"))

    @property
    def schema_name(self) -> str | None:
        spec = self.body.get("response_format", {}).get("json_schema")
        return None if spec is None else str(spec["name"])


class _Asgi:
    """An ASGI endpoint for starlette's Route (which would wrap a bound method as request -> response)."""

    def __init__(self, handle: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._handle = handle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._handle(scope, receive, send)


class _DroppedOnPurpose(Exception):
    """Raised mid-answer so that uvicorn closes the connection."""


def completion(reply: Reply, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


class FakeOpenAI:
    """`with FakeOpenAI() as server:`; `server.play(...)` scripts answers; `server.requests` records."""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder = responder
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._closing = False
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        app = Starlette(routes=[Route("/v1/chat/completions", _Asgi(self._endpoint), methods=["POST"])])
        config = uvicorn.Config(
            app, log_level="critical", access_log=False, lifespan="off", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def play(self, *answers: Scripted) -> None:
        with self._lock:
            self._script.extend(answers)

    def _next(self, body: dict[str, Any]) -> Scripted:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return self.responder(body)
        return Status(500, message="the test's script is exhausted")

    async def _endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self._answer(scope, receive, send)
        finally:
            with self._lock:
                self.in_flight -= 1

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = json.loads(await request.body())
        with self._lock:
            self.requests.append(Recorded(headers=dict(request.headers), body=body))
        answer = self._next(body)
        until = time.monotonic() + answer.delay_s
        while time.monotonic() < until and not self._closing:  # a delayed answer ends with the server
            await asyncio.sleep(min(0.02, until - time.monotonic()))
        if isinstance(answer, Drop):
            headers = [(b"content-type", b"application/json"), (b"content-length", b"4096")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b'{"id": "chatcmpl-', "more_body": True})
            raise _DroppedOnPurpose
        if isinstance(answer, Status):
            error = {"error": {"message": answer.message, "type": "scripted", "code": str(answer.code)}}
            extra = {} if answer.retry_after is None else {"retry-after": answer.retry_after}
            response = JSONResponse(error, status_code=answer.code, headers=extra)
        else:
            response = JSONResponse(completion(answer, str(body.get("model"))))
        await response(scope, receive, send)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the fake OpenAI server did not start")
            time.sleep(0.01)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closing = True
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
