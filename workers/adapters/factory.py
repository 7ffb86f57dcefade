"""Build a tuning's runner, analyzer, applier and sandbox prober from its adapter configs."""

from __future__ import annotations

from service.models.tuning import CommandAdapter, DemoAdapter
from workers.adapters.base import Analyzer, Applier, Prober, Runner
from workers.adapters.command import CommandAnalyzer, CommandApplier, CommandRunner
from workers.adapters.demo import DemoAnalyzer, DemoApplier, DemoRunner
from workers.adapters.sandbox import DemoProber, SandboxProber

AdapterConfig = DemoAdapter | CommandAdapter


def build_runner(config: AdapterConfig, grace_s: float) -> Runner:
    """`grace_s`: how long an agent process has between TERM and KILL."""
    if isinstance(config, DemoAdapter):
        return DemoRunner(config)
    return CommandRunner(config, grace_s)


def build_analyzer(config: AdapterConfig, grace_s: float) -> Analyzer:
    if isinstance(config, DemoAdapter):
        return DemoAnalyzer(config)
    return CommandAnalyzer(config, grace_s)


def build_applier(config: AdapterConfig, grace_s: float) -> Applier:
    if isinstance(config, DemoAdapter):
        return DemoApplier(config)
    return CommandApplier(config, grace_s)


def build_prober(config: AdapterConfig) -> Prober:
    """The prober of the runner's sandbox: pass the tuning's runner config."""
    if isinstance(config, DemoAdapter):
        return DemoProber(config)
    return SandboxProber(config.sandbox)
