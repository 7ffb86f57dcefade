"""Values past their bounds are refused where they enter, over HTTP with a 422 naming the field and on the
CLI with one line, never a 500 or a traceback, and leave nothing behind (issue 54, item 3)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml
from pydantic import SecretStr

from service.api.app import create_app
from service.client.client import TunefleetClient
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import Fleet, case, write_tuning

TOKEN = "tf-hostile-values-write-2b7d"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LONG_REV = int("9" * 255)


@pytest.fixture
async def api(fleet: Fleet, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The API of a fleet with tuning t1 (two demo cases) registered; a write token; exceptions raised."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("a"), case("b")]))
    settings = fleet.settings.model_copy(update={"api_token": SecretStr(TOKEN), "api_public_read": True})
    async with TunefleetClient(settings) as client:
        transport = httpx.ASGITransport(app=create_app(client, settings))
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=AUTH) as web:
            yield web


def fields(answer: httpx.Response) -> list[str]:
    return [f["field"] for f in answer.json().get("fields", [])]


def one_line(done: object) -> str:
    """The CLI's single stderr line of a refusal, with no traceback; it exited non-zero."""
    assert getattr(done, "returncode") != 0  # noqa: B009 (a CompletedProcess)
    stderr = str(getattr(done, "stderr"))  # noqa: B009
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


async def test_repeats_past_the_bound_are_a_422_and_one_cli_line(
    fleet: Fleet, api: httpx.AsyncClient
) -> None:
    """`repeats: 1001` over HTTP is a 422 naming `repeats`; `tunefleet eval --repeat 1001` one line."""
    answer = await api.post("/api/tunings/t1/evals", json={"repeats": 1001})
    assert answer.status_code == 422 and fields(answer) == ["repeats"], answer.text
    line = one_line(tunefleet("eval", "t1", "--repeat", "1001", env=fleet_env(fleet.settings)))
    assert "--repeat 1001" in line and "1000" in line
    assert not (fleet.settings.store / "evals").exists() or not any(
        (fleet.settings.store / "evals").iterdir()
    )


async def test_a_name_with_a_trailing_newline_is_not_a_slug(fleet: Fleet, api: httpx.AsyncClient) -> None:
    """`{"name": "x\\n"}` is a 422 (the slug check takes the whole name), and so is the CLI's `--name`."""
    answer = await api.post("/api/tunings/t1/evals", json={"name": "x\n"})
    assert answer.status_code == 422 and "safe slug" in answer.json()["error"], answer.text
    assert "--name" in one_line(tunefleet("eval", "t1", "--name", "x\n", env=fleet_env(fleet.settings)))


async def test_a_batch_of_nested_brackets_is_a_422(api: httpx.AsyncClient) -> None:
    """A 6 KB batch body of nested brackets is refused as invalid JSON (422), not a RecursionError."""
    body = b"[" * 3000 + b"]" * 3000
    answer = await api.post("/api/tunings/t1/batch", content=body)
    assert answer.status_code == 422 and "recursion limit" in answer.json()["error"], answer.text


async def test_a_rev_too_long_for_a_file_name_is_refused_and_leaves_no_folder(
    fleet: Fleet, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    """A case whose rev has 255 (or 254) digits is a 422 naming `rev` over HTTP, alone or in a batch,
    and one line from `tunefleet submit`; no folder is made for it."""
    for digits in (255, 254):
        rev = int("9" * digits)
        one = await api.post("/api/tunings/t1/cases", json={**case("long"), "rev": rev})
        assert one.status_code == 422 and fields(one) == ["rev"], one.text
        batch = await api.post("/api/tunings/t1/batch", json=[{**case("long"), "rev": rev}])
        assert batch.status_code == 422 and batch.json()["items"][0]["fields"][0]["field"] == "rev"
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump({**case("long"), "rev": LONG_REV}))
    line = one_line(tunefleet("submit", str(path), "--tuning", "t1", env=fleet_env(fleet.settings)))
    assert str(path) in line and "rev" in line
    assert not (fleet.settings.store / "tunings" / "t1" / "cases" / "long").exists()


@pytest.mark.parametrize(
    "limits",
    [
        {"timeout_s": 1e308},
        {"iteration_timeout_s": 1e308},
        {"reviewer_timeout_s": 31 * 86400},
        {"max_voids": 10**9},
    ],
)
async def test_absurd_goal_limits_are_a_422_naming_the_limit(
    fleet: Fleet, api: httpx.AsyncClient, limits: dict[str, float]
) -> None:
    """A goal whose limits ask for 1e308 seconds (or 31 days, or 10^9 voids) is a 422 naming the limit,
    and nothing is queued (`goal start` of such a file is one line too)."""
    spec = {"id": "g1", "goal": "finish", "limits": limits}
    answer = await api.post("/api/goals", json=spec)
    (name,) = limits
    assert answer.status_code == 422 and fields(answer) == [f"limits.{name}"], answer.text
    assert (await api.get("/api/goals")).json() == {"goals": []}
