"""The API's smaller leaks and wrong answers, mended (issue 54, item 5): a stream id Redis would refuse
is a 422, a goal over HTTP names no outage file, the write token never becomes the read cookie, the
cookie is Secure over TLS, a 404 names no folder of the daemon's machine, and an ASGI traceback is
logged as text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from service.api.app import create_app
from service.client.client import TunefleetClient
from tests.support.fleet import Fleet, case, write_tuning

WRITE = "tf-hostile-http-write-81d0"
READ = "tf-hostile-http-read-4c6a"
AUTH = {"Authorization": f"Bearer {WRITE}"}


@pytest.fixture
async def client(fleet: Fleet, tmp_path: Path) -> AsyncIterator[TunefleetClient]:
    """A client of a fleet with tuning t1 registered (one demo case queued, no worker)."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("a")]))
    async with TunefleetClient(fleet.settings) as opened:
        yield opened


def http(client: TunefleetClient, scheme: str = "http", **update: Any) -> httpx.AsyncClient:
    """The app with both tokens, at `scheme://t`."""
    settings = client.settings.model_copy(
        update={"api_token": SecretStr(WRITE), "api_read_token": SecretStr(READ), **update}
    )
    transport = httpx.ASGITransport(app=create_app(client, settings))
    return httpx.AsyncClient(transport=transport, base_url=f"{scheme}://t")


@pytest.mark.parametrize(
    "after",
    [
        "99999999999999999999999-0",
        "1-99999999999999999999999",
        "\u0661\u0662-0",
        "18446744073709551615-18446744073709551615",
    ],
)
async def test_a_stream_id_redis_would_refuse_is_a_422(client: TunefleetClient, after: str) -> None:
    """`after` past 2^64-1 in either part, in another script's digits, or the last id there is, is a 422
    naming `after` (not a 503 saying Redis is unavailable); the largest valid id is a 200."""
    async with http(client) as api:
        answer = await api.get("/api/events", params={"after": after}, headers=AUTH)
        assert answer.status_code == 422, answer.text
        assert [f["field"] for f in answer.json()["fields"]] == ["after"]
        fine = await api.get("/api/events", params={"after": "18446744073709551615-0"}, headers=AUTH)
        assert fine.status_code == 200 and fine.json()["events"] == []


async def test_a_goal_over_http_names_no_outage_file(client: TunefleetClient) -> None:
    """A goal spec whose demo runner names an outage file is a 422 naming it: the answer would tell the
    caller whether a path exists on the workers."""
    spec = {"id": "g1", "goal": "finish", "runner": {"kind": "demo", "outage_file": "/etc/shadow"}}
    async with http(client) as api:
        answer = await api.post("/api/goals", json=spec, headers=AUTH)
        assert answer.status_code == 422 and [f["field"] for f in answer.json()["fields"]] == [
            "runner.outage_file"
        ]
        assert (await api.get("/api/goals", headers=AUTH)).json() == {"goals": []}


async def test_the_write_token_is_never_kept_as_the_read_cookie(client: TunefleetClient) -> None:
    """`/?token=<write token>` is a 403 that sets no cookie; the read token is kept, and the cookie
    then reads."""
    async with http(client) as api:
        refused = await api.get(f"/?token={WRITE}")
        assert refused.status_code == 403 and "set-cookie" not in refused.headers
        assert "read token" in refused.json()["error"]
        kept = await api.get(f"/?token={READ}")
        assert kept.status_code == 303 and READ in kept.headers["set-cookie"]
        assert (await api.get("/api/status")).status_code == 200


@pytest.mark.parametrize(
    ("scheme", "headers", "setting", "secure"),
    [
        ("https", {}, "auto", True),
        ("http", {"X-Forwarded-Proto": "https"}, "auto", True),
        ("http", {}, "auto", False),
        ("http", {}, "always", True),
    ],
)
async def test_the_read_cookie_is_secure_over_tls(
    client: TunefleetClient, scheme: str, headers: dict[str, str], setting: str, secure: bool
) -> None:
    """The read cookie carries `Secure` when the request came over TLS (its URL, or a proxy's
    X-Forwarded-Proto), or always with `api_cookie_secure: always`; not over plain HTTP by default."""
    async with http(client, scheme, api_cookie_secure=setting) as api:
        kept = await api.get(f"/?token={READ}", headers=headers)
    assert kept.status_code == 303
    assert ("secure" in kept.headers["set-cookie"].lower().split("; ")) == secure


async def test_a_404_names_no_folder_of_the_daemons_machine(client: TunefleetClient) -> None:
    """An unknown evaluation's 404, read or cancelled, names the evaluation and not the store's path."""
    store = str(client.settings.store.resolve())
    async with http(client) as api:
        for answer in (
            await api.get("/api/evals/nope", headers=AUTH),
            await api.get("/api/evals/nope/compare/other", headers=AUTH),
            await api.post("/api/evals/nope/cancel", headers=AUTH),
        ):
            assert answer.status_code == 404 and "nope" in answer.json()["error"]
            assert store not in answer.text and "/" not in answer.json()["error"]


def test_a_foreign_traceback_is_logged_as_text(tmp_path: Path) -> None:
    """A stdlib record with exc_info (uvicorn's "Exception in ASGI application") is one JSON line whose
    `exception` holds the traceback's text, not `<traceback object>`."""
    script = (
        "import logging\n"
        "from service.core import logs\n"
        "logs.configure('json')\n"
        "try:\n    raise RuntimeError('boom')\n"
        "except RuntimeError:\n"
        "    logging.getLogger('uvicorn.error').exception('Exception in ASGI application')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    (line,) = done.stderr.splitlines()
    record = json.loads(line)
    assert record["event"] == "Exception in ASGI application"
    assert (
        "Traceback (most recent call last)" in record["exception"]
        and "RuntimeError: boom" in record["exception"]
    )
    assert "traceback object" not in line
