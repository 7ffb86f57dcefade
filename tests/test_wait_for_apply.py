"""Run starts wait for a pending apply (setting `wait_for_apply`), or do not when it is off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import Fleet, case, demo_adapter, event_time_s, wait_until, write_tuning


def first(events: list[dict[str, Any]], kind: str, case_id: str, step: str) -> dict[str, Any]:
    return next(e for e in events if e["kind"] == kind and e.get("case") == case_id and e.get("step") == step)


@pytest.mark.parametrize("wait", [True, False], ids=["waits", "does-not-wait"])
async def test_a_run_start_waits_for_the_apply_under_way(fleet: Fleet, tmp_path: Path, wait: bool) -> None:
    """While an apply holds the lock, another case's run start waits for it (and runs on the version it
    publishes) only if the setting says so."""
    fleet.settings = fleet.settings.model_copy(update={"wait_for_apply": wait})
    adapter = demo_adapter(run_ms=100, analyze_ms=50, apply_ms=3000)
    tuning = write_tuning(tmp_path / "t", [case("applies", rules=["applies-a"])], adapter=adapter)
    await fleet.start_tuning(tuning)
    fleet.start_worker()
    await wait_until(
        lambda: any(e["kind"] == "step_started" and e.get("step") == "apply" for e in fleet.events()),
        30,
        "the apply to start",
    )
    async with fleet.client() as client:
        from service.core.models.case import Case

        assert await client.submit("t1", Case.model_validate(case("late")))
    await fleet.wait_finished(2)
    events = fleet.events()
    applied = first(events, "step_finished", "applies", "apply")
    late = first(events, "step_started", "late", "run")
    if wait:  # it ran on the applied version (it started once that was published and the lock let go)
        assert applied["data"]["version"] and late["data"]["version"] == applied["data"]["version"]
    else:
        assert event_time_s(late) < event_time_s(applied) - 1.0
        assert late["data"]["version"] != applied["data"]["version"]
