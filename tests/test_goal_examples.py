"""The example goals (examples/goals/, pursued by `make demo`) each reach the outcome they declare."""

from __future__ import annotations

from pathlib import Path

from service.kinds.goals.demo import example_specs, expectation, met
from tests.support.fleet import Fleet
from tests.support.goals import goal_state, wait_goal_ended

EXAMPLES = Path(__file__).parent.parent / "examples" / "goals"


async def test_every_example_goal_reaches_its_declared_outcome(fleet: Fleet) -> None:
    """All example goals at once on one worker: each ends as its `demo.expect` says, limit included."""
    specs = example_specs(EXAMPLES)
    assert len(specs) >= 5 and all(expectation(spec) is not None for spec in specs)
    fleet.start_worker()
    async with fleet.client() as client:
        for spec in specs:
            await client.goals.start(spec)
    for spec in specs:
        await wait_goal_ended(fleet, spec.id, timeout_s=60)
    missed = {
        spec.id: goal_state(fleet, spec.id) for spec in specs if not met(spec, goal_state(fleet, spec.id))
    }
    assert missed == {}
