"""The TODO a planner writes, in Markdown, validated before any work is done on it.

A task is a checkbox item whose text starts with an id and a colon: `- [ ] T1: Write the parser`
(`[x]` marks one done, `*` may stand for `-`). Other lines (headings, prose, notes) are allowed. The
TODO is refused, with the line and what was expected, when a checkbox item has no id or no title, an
id repeats, or there is no task at all.
"""

from __future__ import annotations

import re

from service.core.errors import TunefleetError
from service.kinds.goals.state import TodoTask

CHECKBOX = re.compile(r"^\s*[-*]\s+\[(?P<mark>[ xX])\]\s*(?P<text>.*)$")
TASK = re.compile(r"^(?P<id>[A-Za-z0-9][A-Za-z0-9._-]{0,63})\s*:\s*(?P<title>\S.*)$")
MAX_TODO_BYTES = 256 * 1024


class TodoError(TunefleetError):
    """A TODO that cannot be worked: the message names the line and what was expected."""


def parse_todo(text: str) -> list[TodoTask]:
    """The TODO's tasks, in order; TodoError naming the first problem."""
    if len(text.encode()) > MAX_TODO_BYTES:
        raise TodoError(f"the TODO is larger than {MAX_TODO_BYTES // 1024} KiB")
    tasks: list[TodoTask] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        box = CHECKBOX.match(line)
        if box is None:
            continue
        task = TASK.match(box["text"].strip())
        if task is None:
            raise TodoError(
                f"line {number}: a checkbox item must be '- [ ] <id>: <title>' (an id of letters, digits, "
                f"'.', '_' or '-', a colon, then a title); got {line.strip()!r}"
            )
        if task["id"] in seen:
            raise TodoError(f"line {number}: task id {task['id']!r} is used twice")
        seen.add(task["id"])
        tasks.append(TodoTask(id=task["id"], title=task["title"].strip(), done=box["mark"] != " "))
    if not tasks:
        raise TodoError("no tasks: write at least one checkbox item '- [ ] <id>: <title>'")
    return tasks
