"""`tunefleet init`: a working tuning to start from, for one's own agent or an agent CLI.

It writes `tuning.yaml`, a `system/` folder of instructions and two example cases with rubrics, from
the templates in `service/cli/templates/` (`common/` and the agent's own folder). For `command`, three
short commented scripts in `agents/` follow the contract of docs/adapters.md: a runner, a grader and
an editor that tune the example instructions to pass both cases with no model at all, so that the
loop can be seen working before any of it is replaced. For `claude-code` and `codex`, the runner is
the wrapper of examples/agents/, copied beside the tuning. Nothing that exists is overwritten.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Literal

from service.core.errors import ConfigError

Agent = Literal["command", "llm", "claude-code", "codex"]
AGENTS: tuple[Agent, ...] = ("command", "llm", "claude-code", "codex")

TEMPLATES = Path(__file__).parent / "templates"
EXAMPLE_AGENTS = Path(__file__).resolve().parents[2] / "examples" / "agents"
WRAPPERS: dict[Agent, tuple[str, ...]] = {
    "claude-code": ("claude_runner.py", "wrapper.py"),
    "codex": ("codex_runner.py", "wrapper.py"),
}
"""The agent CLI wrappers each agent's tuning runs (from examples/agents/, docs/adapters.md)."""
TEMPLATE_NAME = "my-agent"


def init_tuning(folder: Path, agent: Agent) -> list[Path]:
    """Write a tuning for `agent` into `folder` (made if need be); the files written, in order.
    ConfigError, with nothing written, when one of them exists already."""
    plan = [
        (source, relative)
        for root in (TEMPLATES / "common", TEMPLATES / agent)
        for source, relative in _files(root)
    ]
    plan += [(EXAMPLE_AGENTS / name, Path("agents") / name) for name in WRAPPERS.get(agent, ())]
    taken = [folder / relative for _, relative in plan if (folder / relative).exists()]
    if taken:
        raise ConfigError(f"{taken[0]} exists ({len(taken)} of the files init writes do): nothing written")
    missing = [source for source, _ in plan if not source.is_file()]
    if missing:
        raise ConfigError(f"{missing[0]} is missing from this installation: the {agent} template needs it")
    written = []
    for source, relative in plan:
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative == Path("tuning.yaml"):
            text = source.read_text(encoding="utf-8")
            target.write_text(text.replace(f"name: {TEMPLATE_NAME}", f"name: {tuning_name(folder)}", 1))
        else:
            shutil.copyfile(source, target)
        written.append(target)
    return written


def tuning_name(folder: Path) -> str:
    """A tuning name (a safe slug) from the folder's name; the template's own when nothing is left of it."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", folder.resolve().name.lower()).strip("-._")[:64]
    return slug or TEMPLATE_NAME


def _files(root: Path) -> list[tuple[Path, Path]]:
    return [
        (path, path.relative_to(root))
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    ]
