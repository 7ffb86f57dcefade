"""Build a tuning's runner, analyzer, applier and sandbox prober from its adapter configs."""

from __future__ import annotations

from service.errors import ConfigError
from service.models.tuning import CommandAdapter, DemoAdapter, LlmAdapter
from workers.adapters.base import Analyzer, Applier, Prober, Runner
from workers.adapters.command import CommandAnalyzer, CommandApplier, CommandRunner
from workers.adapters.demo import DemoAnalyzer, DemoApplier, DemoRunner
from workers.adapters.llm import LlmAnalyzer, LlmApplier
from workers.adapters.process import AgentHost
from workers.adapters.sandbox import DemoProber, SandboxProber

AdapterConfig = DemoAdapter | CommandAdapter | LlmAdapter

NO_LLM_RUNNER = "runner: kind llm is for the analyzer and the applier only"


def build_runner(config: AdapterConfig, host: AgentHost) -> Runner:
    """`host`: what the worker's machine gives agent processes (grace, cgroups)."""
    if isinstance(config, DemoAdapter):
        return DemoRunner(config)
    if isinstance(config, LlmAdapter):  # TuningConfig refuses it when the tuning file is read
        raise ConfigError(NO_LLM_RUNNER)
    return CommandRunner(config, host)


def build_analyzer(config: AdapterConfig, host: AgentHost) -> Analyzer:
    if isinstance(config, DemoAdapter):
        return DemoAnalyzer(config)
    if isinstance(config, LlmAdapter):
        return LlmAnalyzer(config)
    return CommandAnalyzer(config, host)


def build_applier(config: AdapterConfig, host: AgentHost) -> Applier:
    if isinstance(config, DemoAdapter):
        return DemoApplier(config)
    if isinstance(config, LlmAdapter):
        return LlmApplier(config)
    return CommandApplier(config, host)


def build_prober(config: AdapterConfig) -> Prober:
    """The prober of the runner's sandbox: pass the tuning's runner config."""
    if isinstance(config, DemoAdapter):
        return DemoProber(config)
    if isinstance(config, LlmAdapter):
        raise ConfigError(NO_LLM_RUNNER)
    return SandboxProber(config.sandbox)
