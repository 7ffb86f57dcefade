"""A real worker process (`python -m workers`) with one defect injected: every goal's load raises
OverflowError, as the load of a goal whose deadline lay past the calendar did before goal limits were
bounded (issue 54). Bounded limits leave no input that reaches it, so the tests inject it to prove the
envelope's guard for defects to come: a job that crashes at every claim ends failed (poison) at
`max_lease_losses`, and its worker runs on.

Run as `python -m tests.support.crashing_worker --concurrency N` with the fleet's TUNEFLEET_* settings.
"""

from __future__ import annotations

import sys
from typing import Any

from workers.__main__ import main
from workers.kinds.goals.kind import GoalKind


async def _crashing_load(self: GoalKind, *args: Any, **kwargs: Any) -> Any:
    raise OverflowError("date value out of range")


if __name__ == "__main__":
    GoalKind.load = _crashing_load  # type: ignore[method-assign]
    sys.exit(main())
