"""One job of each kind on a real fleet, driven the same way, so that a rule of the job envelope is
tested for every kind: a case of tuning `t1`, or a goal `g1` run on tuning `t1` (so that it has a
tuning to hold, a budget and a breaker). Each kind translates the demo knobs a test asks for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.core.models.goal import FINAL_STATUSES
from tests.support.fleet import Fleet, case, wait_until, write_tuning
from tests.support.goals import goal_state, start_goal, write_goal


@dataclass(frozen=True)
class Ended:
    state: str
    reason: str
    tokens: int


class Kind:
    """A job of one kind in the tuning `t1`."""

    name: str

    async def start(
        self,
        fleet: Fleet,
        tmp_path: Path,
        *,
        tokens: int = 0,
        step_ms: int = 0,
        config: Any = None,
        **knobs: Any,
    ) -> None:
        """Register `t1` (`config`: its tuning fields) and submit the job with the demo knobs given."""
        raise NotImplementedError

    def ended(self, fleet: Fleet) -> Ended | None:
        raise NotImplementedError

    async def wait_ended(self, fleet: Fleet, timeout_s: float = 60) -> Ended:
        await wait_until(lambda: self.ended(fleet) is not None, timeout_s, f"the {self.name} to end")
        done = self.ended(fleet)
        assert done is not None
        return done

    async def cancel(self, fleet: Fleet) -> None:
        raise NotImplementedError

    def marks(self, fleet: Fleet) -> list[str]:
        """What set a try aside or marked the job for a fault (void tries, void goal steps)."""
        kinds = ("attempt_set_aside", "step_set_aside")
        return [e["kind"] for e in fleet.events() if e["kind"] in kinds]


class CaseKind(Kind):
    name = "case"

    async def start(
        self,
        fleet: Fleet,
        tmp_path: Path,
        *,
        tokens: int = 0,
        step_ms: int = 0,
        config: Any = None,
        **knobs: Any,
    ) -> None:
        job = case("c1", tokens=tokens, latency_ms=step_ms, **knobs)
        await fleet.start_tuning(write_tuning(tmp_path / "t", [job], **(config or {})))

    def ended(self, fleet: Fleet) -> Ended | None:
        row = fleet.results().get("c1")
        if row is None or row.state == "unfinished":
            return None
        return Ended(row.state, row.reason or "", row.tokens)

    async def cancel(self, fleet: Fleet) -> None:
        async with fleet.client() as client:
            assert await client.cancel("t1", "c1")


class GoalKind(Kind):
    name = "goal"

    async def start(
        self,
        fleet: Fleet,
        tmp_path: Path,
        *,
        tokens: int = 0,
        step_ms: int = 0,
        config: Any = None,
        **knobs: Any,
    ) -> None:
        await fleet.start_tuning(write_tuning(tmp_path / "t", [], **(config or {})))
        demo = {"tokens": tokens, "step_ms": step_ms, **knobs}
        await start_goal(fleet, write_goal(tmp_path / "goals", demo=demo), "t1")

    def ended(self, fleet: Fleet) -> Ended | None:
        state = goal_state(fleet)
        if state is None or state.status not in FINAL_STATUSES or state.completion is None:
            return None
        return Ended(state.status, state.completion.reason, state.spent.tokens)

    async def cancel(self, fleet: Fleet) -> None:
        async with fleet.client() as client:
            assert await client.goals.cancel("g1")


KINDS = [CaseKind(), GoalKind()]
"""Parametrize a rule's test over these (ids: `case`, `goal`)."""
