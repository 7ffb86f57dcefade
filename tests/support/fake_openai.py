"""A real OpenAI-compatible Chat Completions server for the tests, on a free loopback port.

It serves `POST /v1/chat/completions` (starlette under uvicorn, in a thread of its own so that a test
may block or run a worker process meanwhile), records every request (headers, JSON body, arrival
time), and answers from a script the test plays: a completion with its usage, an error status with an
optional Retry-After, or a connection dropped in the middle of the answer. When the script is empty it
asks the test's `responder`, if any. Any answer may be delayed (`delay_s`); the server counts the
requests it is answering (`in_flight`) and the most there ever were at once (`max_in_flight`).

Given an `upstream` (another OpenAI-compatible server: the tests' real llama-cpp-python server), a
`Forward` answer relays the request there and its answer back, recorded like the others (status, usage),
and every other path (a tokenize endpoint, say) is relayed as it is. Given a `tokenizer`, it bills
every completion it starts by its own count of the prompt (whether or not the client waits for the
answer) and of the answer, and serves llama.cpp's `POST /tokenize` with the same count.
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

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send


@dataclass(frozen=True)
class Reply:
    """A 200 chat completion whose message is `content`, with its usage."""

    content: str
    prompt_tokens: int = 100
    completion_tokens: int = 20
    delay_s: float = 0.0
    usage: bool = True
    """False: the answer has no `usage` (some servers, some proxies)."""
    cached_tokens: int = 0
    """Of prompt_tokens, those served from the prompt cache (`prompt_tokens_details.cached_tokens`)."""


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


@dataclass(frozen=True)
class Forward:
    """Relay the request to the upstream server and its answer back."""


Scripted = Reply | Status | Drop | Forward
Responder = Callable[[dict[str, Any]], Scripted]


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it."""

    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    client: tuple[str, int] | None = None
    """The client's address and port: one TCP connection per distinct port."""
    answer: dict[str, Any] = field(default_factory=dict)
    """How it was answered: `status`, `done_at` (monotonic) when relayed, and a completion's `usage`."""

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
    usage: dict[str, Any] = {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }
    if reply.cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
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
        **({"usage": usage} if reply.usage else {}),
    }


class FakeOpenAI:
    """`with FakeOpenAI() as server:`; `server.play(...)` scripts answers; `server.requests` records."""

    def __init__(
        self,
        responder: Responder | None = None,
        upstream: str | None = None,
        tokenizer: Callable[[str], int] | None = None,
    ) -> None:
        self.responder = responder
        self.upstream = upstream.rstrip("/") if upstream else None
        self.tokenizer = tokenizer
        self.billed_tokens = 0
        """With a tokenizer: every completion's prompt and answer tokens, by its count."""
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._closing = False
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        # Named TCP (not protocol 0), as a socket the server bound itself would be: asyncio turns off
        # Nagle's algorithm only on such sockets' connections. Without it each answer on a kept-alive
        # connection waits for the client's delayed ACK of its headers: 40 ms more per call.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        routes = [Route("/v1/chat/completions", _Asgi(self._endpoint), methods=["POST"])]
        if tokenizer is not None:
            routes.append(Route("/tokenize", _Asgi(self._tokenize), methods=["POST"]))
        if upstream is not None:
            routes.append(Route("/{path:path}", _Asgi(self._relay), methods=["GET", "POST"]))
        app = Starlette(routes=routes)
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

    def bill(self, body: dict[str, Any], reply: Reply) -> None:
        """Count what a completion costs by the server's own tokenizer, once it is started."""
        if self.tokenizer is None:
            return
        messages = body.get("messages", [])
        prompt = self.tokenizer("\n".join(str(m.get("content", "")) for m in messages))
        with self._lock:
            self.billed_tokens += prompt + 3 * len(messages) + 3 + self.tokenizer(reply.content)

    async def _tokenize(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.tokenizer is not None
        body = json.loads(await Request(scope, receive).body())
        count = self.tokenizer(str(body.get("content", "")))
        await JSONResponse({"tokens": list(range(count))})(scope, receive, send)

    async def _relay(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Any other path, to the upstream server as it is."""
        assert self.upstream is not None
        request = Request(scope, receive)
        async with httpx.AsyncClient(timeout=600) as client:
            got = await client.request(
                request.method,
                self.upstream + request.url.path,
                content=await request.body(),
                headers={"content-type": request.headers.get("content-type", "application/json")},
            )
        await Response(got.content, got.status_code, media_type="application/json")(scope, receive, send)

    async def _forward(self, body: dict[str, Any], recorded: Recorded) -> Response:
        if self.upstream is None:
            raise RuntimeError("Forward without an upstream server")
        async with httpx.AsyncClient(timeout=600) as client:
            got = await client.post(self.upstream + "/v1/chat/completions", json=body)
        answer: dict[str, Any] = {"status": got.status_code, "done_at": time.monotonic()}
        if got.status_code == 200:
            answer["usage"] = got.json().get("usage")
        recorded.answer.update(answer)
        return Response(got.content, got.status_code, media_type="application/json")

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = json.loads(await request.body())
        client = (request.client.host, request.client.port) if request.client else None
        recorded = Recorded(headers=dict(request.headers), body=body, client=client)
        with self._lock:
            self.requests.append(recorded)
        answer = self._next(body)
        if isinstance(answer, Forward):
            await (await self._forward(body, recorded))(scope, receive, send)
            return
        if isinstance(answer, Reply):
            self.bill(body, answer)
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
            recorded.answer["status"] = answer.code
        else:
            answered = completion(answer, str(body.get("model")))
            response = JSONResponse(answered)
            recorded.answer.update(status=200, usage=answered.get("usage"))
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
