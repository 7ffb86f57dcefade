"""A write-token holder cannot supply the measure of a tuning's report or of a gate (issue 54, item 1):
the fleet's evaluation names are its own, the daemon writes REPORT.md only from its own held-out runs
and only once every train case ended, and the API's evaluation requests are checked before use."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from service.api.app import create_app
from service.client.client import TunefleetClient
from service.kinds.evals.errors import EvalError
from service.kinds.evals.holdout import HeldOutRuns
from service.kinds.evals.names import final_eval_id, initial_eval_id
from service.kinds.evals.report import REPORT_FILE
from service.kinds.evals.split import eval_cases
from tests.support.fleet import Fleet, case, demo_adapter, write_tuning

TOKEN = "tf-hostile-evals-write-5c1e"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CASES = [case(f"c{i}") for i in range(8)]


async def _held_out_tuning(fleet: Fleet, tmp_path: Path) -> None:
    """Tuning t1 with a held-out split, registered by the daemon (its first evaluation queued); no worker."""
    tuning_file = write_tuning(
        tmp_path / "t", CASES, adapter=demo_adapter(), holdout={"fraction": 0.25, "seed": 3}
    )
    await fleet.start_tuning(tuning_file)


async def test_a_client_cannot_take_a_name_the_fleet_keeps_for_itself(fleet: Fleet, tmp_path: Path) -> None:
    """Over HTTP with the write token, an evaluation named like the daemon's held-out runs or a gate's
    is refused with a 422 naming the field, and nothing is kept under that name."""
    await _held_out_tuning(fleet, tmp_path)
    settings = fleet.settings.model_copy(update={"api_token": SecretStr(TOKEN)})
    async with TunefleetClient(settings) as client:
        app = create_app(client, settings)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as api:
            for name in (final_eval_id("t1"), "other.holdout-final", initial_eval_id("t1"), "gate-0a1b"):
                asked = {"name": name, "version": "initial", "split": "holdout"}
                answer = await api.post("/api/tunings/t1/evals", json=asked, headers=AUTH)
                assert answer.status_code == 422, (name, answer.text)
                assert "the fleet's own" in answer.json()["error"]
                if name != initial_eval_id("t1"):  # the daemon made that one at registration
                    assert not (settings.store / "evals" / name).exists()


async def test_the_report_is_never_written_from_an_evaluation_the_daemon_did_not_make(
    fleet: Fleet, tmp_path: Path
) -> None:
    """An evaluation of purpose `user` kept under the final run's id (a store from before the names
    were reserved) ends, both runs ended: the daemon writes no REPORT.md and logs why, once."""
    await _held_out_tuning(fleet, tmp_path)
    async with fleet.client() as client:
        tuning = client.tuning_store("t1")
        made = await client.evals.create("t1", version="initial", split="holdout", name="plain")
        _, _, chosen = eval_cases(tuning, None, "holdout")
        await client.evals.launch(made.model_copy(update={"id": final_eval_id("t1")}), chosen)
        for eval_id in (initial_eval_id("t1"), final_eval_id("t1")):
            await client.evals.cancel(eval_id)
        runs = HeldOutRuns(client.evals, client.store, walk_every_s=0.0)
        with capture_logs() as logs:
            assert await runs.advance() == []
            assert await runs.advance() == []
    assert not (tuning.root / REPORT_FILE).exists()
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["holdout_eval_not_ours"]


async def test_the_report_waits_for_every_train_case_even_when_both_runs_ended(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The daemon's own final run ended early (cancelled) while the train cases have no outcome: no
    REPORT.md is written until they have one."""
    await _held_out_tuning(fleet, tmp_path)
    async with fleet.client() as client:
        tuning = client.tuning_store("t1")
        await client.evals.create(
            "t1", version="main", split="holdout", name=final_eval_id("t1"), purpose="holdout-final"
        )
        for eval_id in (initial_eval_id("t1"), final_eval_id("t1")):
            await client.evals.cancel(eval_id)
        runs = HeldOutRuns(client.evals, client.store, walk_every_s=0.0)
        assert await runs.advance() == []
    assert not (tuning.root / REPORT_FILE).exists()


async def test_a_gate_never_takes_an_evaluation_it_did_not_make_for_its_own(
    fleet: Fleet, tmp_path: Path
) -> None:
    """An acceptance gate's launch under an id that holds another evaluation (of another tuning, or
    asked by a user) is refused, not taken for the gate's own measure; its own is taken again."""
    await fleet.start_tuning(write_tuning(tmp_path / "t", CASES, adapter=demo_adapter()))
    async with fleet.client() as client:
        made = await client.evals.create("t1", version="initial", name="plain")
        _, _, chosen = eval_cases(client.tuning_store("t1"), None, None)
        gate = made.model_copy(
            update={"id": "gate-0123456789abcdef0123", "purpose": "gate", "source": "gate"}
        )
        planted = gate.model_copy(update={"purpose": "user", "source": "all"})
        await client.evals.launch(planted, chosen)  # a user's evaluation under the gate's id (an old store)
        with pytest.raises(EvalError, match="not reused"):
            await client.evals.launch(gate, chosen)
        own = gate.model_copy(update={"id": "gate-own"})
        assert (await client.evals.launch(own, chosen)).purpose == "gate"
        assert (await client.evals.launch(own, chosen)).id == "gate-own"  # its own is taken again
