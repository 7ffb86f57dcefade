"""The one factory of the fleet's adapters: for each role, which adapter each kind of config builds.

A role is a row of `RoleAdapters`, whatever job kind asks for it: the case roles (runner, analyzer,
applier) and the goal roles (the runner's agent works a goal's TODO, the analyzer's plans and reviews).
A new job kind reuses the rows it needs, or adds its own.

The LLM adapters are imported by their builders, when a config first asks for one: with them comes the
`openai` SDK (about half a second of CPU to import), which a worker whose tunings use no model never needs.
A job that needs them has them imported in a thread first (`llm_modules_loaded`): imported on the event
loop, they would stall every other job's heartbeat for as long (a lease lost under load).
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import structlog

from service.core.errors import ConfigError
from service.core.io.heap import freeze_long_lived
from service.core.models.tuning import CommandAdapter, DemoAdapter, LlmAdapter
from workers.adapters.base import Analyzer, Applier, Prober, Runner
from workers.adapters.command import CommandAnalyzer, CommandApplier, CommandRunner
from workers.adapters.demo import DemoRunner
from workers.adapters.demo_meta import DemoAnalyzer, DemoApplier
from workers.adapters.goal_base import GoalAgent
from workers.adapters.goal_command import CommandGoalAgent
from workers.adapters.goal_demo import DemoGoalAgent
from workers.adapters.llm.pool import Providers
from workers.adapters.process import AgentHost
from workers.adapters.sandbox import DemoProber, SandboxProber

AdapterConfig = DemoAdapter | CommandAdapter | LlmAdapter
GoalRole = Literal["runner", "analyzer"]
log = structlog.get_logger()
T = TypeVar("T")


@dataclass(frozen=True)
class RoleAdapters(Generic[T]):
    """How one role's adapter is built from each kind of config. `host`: what the worker's machine gives
    agent processes (grace, cgroups); `llm`: the worker's LLM providers (their clients, fleet-wide
    limits and formats; a worker passes its own)."""

    demo: Callable[[DemoAdapter], T]
    command: Callable[[CommandAdapter, AgentHost], T]
    llm: Callable[[LlmAdapter, Providers | None], T]

    def build(self, config: object, host: AgentHost, llm: Providers | None = None) -> T:
        if isinstance(config, DemoAdapter):
            return self.demo(config)
        if isinstance(config, LlmAdapter):
            return self.llm(config, llm)
        if isinstance(config, CommandAdapter):
            return self.command(config, host)
        raise ConfigError(f"no adapter of kind {getattr(config, 'kind', '?')!r} takes this role")


class NoSandboxProber:
    """The prober of a runner with no sandbox around it (kind llm runs in the worker's process): always up."""

    async def probe(self) -> str | None:
        return None


LLM_MODULES = (
    "workers.adapters.llm.runner",
    "workers.adapters.llm.analyzer",
    "workers.adapters.llm.applier",
    "workers.adapters.llm.goal",
)
"""The modules the LLM builders below import (and, through them, the SDK)."""


def llm_roles(roles: Iterable[object]) -> list[LlmAdapter]:
    """The roles' configs that are a model's (`kind: llm`)."""
    return [role for role in roles if isinstance(role, LlmAdapter)]


def llm_modules_present() -> bool:
    return all(name in sys.modules for name in LLM_MODULES)


def _import_llm_modules() -> float:
    """Import LLM_MODULES (in the calling thread); the thread's CPU seconds that took."""
    began = time.thread_time()
    for name in LLM_MODULES:
        importlib.import_module(name)
    return time.thread_time() - began


async def llm_modules_loaded(then: Callable[[], object] | None = None) -> None:
    """Import the LLM adapters' modules in a thread, the first time a job needs them (the module's
    docstring), and run `then` in that thread after them (the job's clients warmed: Providers.warm); at
    once when they are loaded. Logged (`llm_modules_loaded`) with the CPU the import took (`cpu_ms`, a
    cost of the worker's first LLM job, once per process, not of its calls; with the collection and
    freeze of what it made, service.core.io.heap) and the warm-up's."""

    def load() -> tuple[float, float]:
        imported_s = _import_llm_modules()
        began = time.thread_time()
        if then is not None:
            then()
        warmed_s = time.thread_time() - began
        began = time.thread_time()
        freeze_long_lived()  # the modules live as long as the worker
        return imported_s + time.thread_time() - began, warmed_s

    if llm_modules_present():
        return
    imported_s, warmed_s = await asyncio.to_thread(load)
    log.info("llm_modules_loaded", cpu_ms=round(1000 * imported_s, 1), warm_cpu_ms=round(1000 * warmed_s, 1))


def _llm_runner(config: LlmAdapter, llm: Providers | None) -> Runner:
    from workers.adapters.llm.runner import LlmRunner  # on first use (the module's docstring)

    return LlmRunner(config, llm)


def _llm_analyzer(config: LlmAdapter, llm: Providers | None) -> Analyzer:
    from workers.adapters.llm.analyzer import LlmAnalyzer  # on first use (the module's docstring)

    return LlmAnalyzer(config, llm)


def _llm_applier(config: LlmAdapter, llm: Providers | None) -> Applier:
    from workers.adapters.llm.applier import LlmApplier  # on first use (the module's docstring)

    return LlmApplier(config, llm)


def _llm_goal_agent(config: LlmAdapter, llm: Providers | None) -> GoalAgent:
    from workers.adapters.llm.goal import LlmGoalAgent  # on first use (the module's docstring)

    return LlmGoalAgent(config, llm)


RUNNER = RoleAdapters[Runner](DemoRunner, CommandRunner, _llm_runner)
ANALYZER = RoleAdapters[Analyzer](DemoAnalyzer, CommandAnalyzer, _llm_analyzer)
APPLIER = RoleAdapters[Applier](DemoApplier, CommandApplier, _llm_applier)
GOAL_ROLES: dict[GoalRole, RoleAdapters[GoalAgent]] = {
    "runner": RoleAdapters[GoalAgent](
        DemoGoalAgent, lambda config, host: CommandGoalAgent(config, host, "runner"), _llm_goal_agent
    ),
    "analyzer": RoleAdapters[GoalAgent](
        DemoGoalAgent, lambda config, host: CommandGoalAgent(config, host, "analyzer"), _llm_goal_agent
    ),
}
"""The goal roles: the runner's agent works a TODO; the analyzer's plans and reviews."""


def build_runner(config: AdapterConfig, host: AgentHost, llm: Providers | None = None) -> Runner:
    return RUNNER.build(config, host, llm)


def build_analyzer(config: AdapterConfig, host: AgentHost, llm: Providers | None = None) -> Analyzer:
    return ANALYZER.build(config, host, llm)


def build_applier(config: AdapterConfig, host: AgentHost, llm: Providers | None = None) -> Applier:
    return APPLIER.build(config, host, llm)


def build_prober(config: AdapterConfig, host: AgentHost | None = None) -> Prober:
    """The prober of the runner's sandbox: pass the tuning's runner config."""
    if isinstance(config, DemoAdapter):
        return DemoProber(config)
    if isinstance(config, LlmAdapter):
        return NoSandboxProber()
    return SandboxProber(config.sandbox, host=host)


def build_goal_agent(
    config: object, host: AgentHost, role: GoalRole, llm: Providers | None = None
) -> GoalAgent:
    """The agent that takes a role's goal steps (ConfigError for a kind that has none); no config: demo."""
    return GOAL_ROLES[role].build(config or DemoAdapter(), host, llm)
