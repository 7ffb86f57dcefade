"""Build a tuning's runner, analyzer, applier and sandbox prober from its adapter configs."""

from __future__ import annotations

from service.models.tuning import CommandAdapter, DemoAdapter
from workers.adapters.base import Analyzer, Applier, Prober, Runner
from workers.adapters.command import CommandAnalyzer, CommandApplier, CommandRunner
from workers.adapters.demo import DemoAnalyzer, DemoApplier, DemoRunner
from workers.adapters.process import AgentHost
from workers.adapters.sandbox import DemoProber, SandboxProber

AdapterConfig = DemoAdapter | CommandAdapter


def build_runner(config: AdapterConfig, host: AgentHost) -> Runner:
    """`host`: what the worker's machine gives agent processes (grace, cgroups)."""
    if isinstance(config, DemoAdapter):
        return DemoRunner(config)
    return CommandRunner(config, host)


def build_analyzer(config: AdapterConfig, host: AgentHost) -> Analyzer:
    if isinstance(config, DemoAdapter):
        return DemoAnalyzer(config)
    return CommandAnalyzer(config, host)


def build_applier(config: AdapterConfig, host: AgentHost) -> Applier:
    if isinstance(config, DemoAdapter):
        return DemoApplier(config)
    return CommandApplier(config, host)


def build_prober(config: AdapterConfig) -> Prober:
    """The prober of the runner's sandbox: pass the tuning's runner config."""
    if isinstance(config, DemoAdapter):
        return DemoProber(config)
    return SandboxProber(config.sandbox)
