"""docs/adapters.md's "Goal steps" section agrees with the code: the placeholders by role, the demo
goal knobs with their defaults, and the schema names it cites."""

from __future__ import annotations

from service.kinds.goals.models import GOAL_PLACEHOLDERS
from tests.test_docs import ADAPTERS, render_default, section, table_rows
from workers.adapters.demo_knobs import GoalDemoKnobs


def test_every_goal_placeholder_is_documented_for_its_roles() -> None:
    """The goal placeholder table has a row per placeholder, saying yes exactly for the roles that give it."""
    rows = table_rows(section(ADAPTERS.read_text(), "Goal placeholders, by role"))
    every = GOAL_PLACEHOLDERS["runner"] | GOAL_PLACEHOLDERS["analyzer"]
    assert set(rows) == {f"{{{name}}}" for name in every}
    for name in every:
        runner, analyzer = rows[f"{{{name}}}"][:2]
        assert (runner == "yes", analyzer == "yes") == (
            name in GOAL_PLACEHOLDERS["runner"],
            name in GOAL_PLACEHOLDERS["analyzer"],
        ), name


def test_every_goal_demo_knob_is_documented() -> None:
    """Each demo goal knob has a row with its true default."""
    rows = table_rows(section(ADAPTERS.read_text(), "`GoalDemoKnobs`"))
    assert set(rows) == set(GoalDemoKnobs.model_fields)
    for name, field in GoalDemoKnobs.model_fields.items():
        assert rows[name][0] == render_default(field), f"GoalDemoKnobs.{name}: documented default"
