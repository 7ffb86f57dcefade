"""Build a tuning's runner, analyzer, applier and sandbox prober from its adapter configs."""

from __future__ import annotations

from service.core.models.tuning import CommandAdapter, DemoAdapter, LlmAdapter
from workers.adapters.base import Analyzer, Applier, Prober, Runner
from workers.adapters.command import CommandAnalyzer, CommandApplier, CommandRunner
from workers.adapters.demo import DemoAnalyzer, DemoApplier, DemoRunner
from workers.adapters.llm import LlmAnalyzer, LlmApplier, LlmRunner, Providers
from workers.adapters.process import AgentHost
from workers.adapters.sandbox import DemoProber, SandboxProber

AdapterConfig = DemoAdapter | CommandAdapter | LlmAdapter


class NoSandboxProber:
    """The prober of a runner with no sandbox around it (kind llm runs in the worker's process): always up."""

    async def probe(self) -> str | None:
        return None


def build_runner(config: AdapterConfig, host: AgentHost, llm: Providers | None = None) -> Runner:
    """`host`: what the worker's machine gives agent processes (grace, cgroups); `llm`: the worker's LLM
    providers (their clients, fleet-wide limits and formats; a worker passes its own)."""
    if isinstance(config, DemoAdapter):
        return DemoRunner(config)
    if isinstance(config, LlmAdapter):
        return LlmRunner(config, llm)
    return CommandRunner(config, host)


def build_analyzer(config: AdapterConfig, host: AgentHost, llm: Providers | None = None) -> Analyzer:
    """`llm`: the worker's LLM providers (a worker passes its own)."""
    if isinstance(config, DemoAdapter):
        return DemoAnalyzer(config)
    if isinstance(config, LlmAdapter):
        return LlmAnalyzer(config, llm)
    return CommandAnalyzer(config, host)


def build_applier(config: AdapterConfig, host: AgentHost, llm: Providers | None = None) -> Applier:
    """`llm`: the worker's LLM providers (a worker passes its own)."""
    if isinstance(config, DemoAdapter):
        return DemoApplier(config)
    if isinstance(config, LlmAdapter):
        return LlmApplier(config, llm)
    return CommandApplier(config, host)


def build_prober(config: AdapterConfig) -> Prober:
    """The prober of the runner's sandbox: pass the tuning's runner config."""
    if isinstance(config, DemoAdapter):
        return DemoProber(config)
    if isinstance(config, LlmAdapter):
        return NoSandboxProber()
    return SandboxProber(config.sandbox)
