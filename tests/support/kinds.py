"""One job of each kind on a real fleet, driven the same way, so that a rule of the job envelope is
tested for every kind: a case of tuning `t1`, a goal `g1` run on tuning `t1` (so that it has a
tuning to hold, a budget and a breaker), or an item of an evaluation `e1` of tuning `t1`. Each kind
translates the demo knobs a test asks for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from service.kinds.evals.store import ItemStore
from service.kinds.goals.models import FINAL_STATUSES
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


class EvalItemKind(Kind):
    """One item of an evaluation `e1` of the tuning `t1`: its case `c1`, once. It ends `graded`, which
    `ended` reads as `completed` when the item passed (the demo case passes), so that a rule's test
    expects the same of every kind."""

    name = "eval_item"

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
        folder = tmp_path / "eval-cases"
        folder.mkdir()
        body = case("c1", tokens=tokens, latency_ms=step_ms, **knobs)
        (folder / "c1.yaml").write_text(yaml.safe_dump(body))
        async with fleet.client() as client:
            await client.evals.create("t1", cases=folder, name="e1")

    def ended(self, fleet: Fleet) -> Ended | None:
        outcome = ItemStore(fleet.settings.store / "evals/e1/items/c1/1", "c1", 1, 1).outcome()
        if outcome is None:
            return None
        state = "completed" if outcome.verdict == "pass" else outcome.state
        return Ended(state, outcome.reason or "", outcome.usage.tokens)

    async def cancel(self, fleet: Fleet) -> None:
        async with fleet.client() as client:
            assert await client.evals.cancel("e1")

    def marks(self, fleet: Fleet) -> list[str]:
        return [e["kind"] for e in fleet.events() if e["kind"] == "eval_item_set_aside"]


KINDS = [CaseKind(), GoalKind(), EvalItemKind()]
"""Parametrize a rule's test over these (ids: `case`, `goal`, `eval_item`)."""
