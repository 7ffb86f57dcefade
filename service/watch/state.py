"""Where the watch is: which case under way is selected, and whether one step is followed.

The selection sticks to a job (not a row number), so rows that come and go above it do not move
it; when its job leaves, the selection stays at the same row number, clamped.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from service.watch.snapshot import RunningStep, WatchSnapshot

Key = Literal["up", "down", "enter", "back", "quit"]
Mode = Literal["overview", "follow"]


class WatchState(BaseModel):
    """The view's state; every key press makes a new one."""

    model_config = ConfigDict(frozen=True)

    mode: Mode = "overview"
    selected_job: tuple[str, str] | None = None
    selected_row: int = 0
    follow: RunningStep | None = None
    quit: bool = False

    def row(self, snapshot: WatchSnapshot) -> int:
        """The selected row of `snapshot.running` (-1 when nothing runs)."""
        if not snapshot.running:
            return -1
        for index, step in enumerate(snapshot.running):
            if (step.tuning, step.job_id) == self.selected_job:
                return index
        return min(max(self.selected_row, 0), len(snapshot.running) - 1)

    def select(self, snapshot: WatchSnapshot, row: int) -> WatchState:
        if not snapshot.running:
            return self.model_copy(update={"selected_job": None, "selected_row": 0})
        row = min(max(row, 0), len(snapshot.running) - 1)
        step = snapshot.running[row]
        return self.model_copy(update={"selected_job": (step.tuning, step.job_id), "selected_row": row})

    def press(self, key: Key, snapshot: WatchSnapshot) -> WatchState:
        """The state after `key`, given what the screen shows now."""
        if key == "quit":
            return self.model_copy(update={"quit": True})
        if self.mode == "follow":
            if key == "back":
                return self.model_copy(update={"mode": "overview", "follow": None})
            return self
        row = self.row(snapshot)
        if key == "up":
            return self.select(snapshot, row - 1)
        if key == "down":
            return self.select(snapshot, row + 1)
        if key == "enter" and row >= 0:
            chosen = self.select(snapshot, row)
            return chosen.model_copy(update={"mode": "follow", "follow": snapshot.running[row]})
        return self

    def track(self, snapshot: WatchSnapshot) -> WatchState:
        """The state after a refresh: the followed step takes the newest facts the worker gave about it."""
        if self.follow is None:
            return self
        for step in snapshot.running:
            if step.same_step(self.follow) and step != self.follow:
                return self.model_copy(update={"follow": step})
        return self
