"""What the llm analyzer and applier share (workers.adapters.llm.analyzer, .applier): an adapter of one
role, bound to its model's settings, the worker's providers and its prompt template, whose step is one
session with the model that ends in the role's outcome; a step error (the provider down, a refused
key, a refused request) is that outcome with the step's exit and what the calls cost before it
(`step_exit`: how an llm step ended).
"""

from __future__ import annotations

import string
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from service.core.models.records import Usage
from service.core.models.tuning import LlmAdapter
from workers.adapters.base import AnalyzeOutcome, ApplyOutcome, StepExit, StepRequest
from workers.adapters.llm.errors import LlmStepError, ProviderAuthFailed, ProviderUnavailable
from workers.adapters.llm.formats import AnswerSchema
from workers.adapters.llm.pool import Providers
from workers.adapters.llm.prompts import PromptStep, load_template
from workers.adapters.llm.provider import check_limits
from workers.adapters.llm.session import Session, in_session

OutcomeT = TypeVar("OutcomeT", bound=AnalyzeOutcome | ApplyOutcome)


def step_exit(
    started: float, error: str | None, down: LlmStepError | None = None, spent: Usage | None = None
) -> StepExit:
    """How an LLM step ended: `down` says why it failed (the provider's outage is `provider_down`, a
    refused key `key_refused`), `spent` what its calls cost whatever came of them."""
    duration_ms = max(0, int((time.monotonic() - started) * 1000))
    return StepExit(
        exit_code=0 if error is None else 1,
        duration_ms=duration_ms,
        error=error,
        provider_down=str(down) if isinstance(down, ProviderUnavailable) else None,
        key_refused=str(down) if isinstance(down, ProviderAuthFailed) else None,
        spent=spent,
    )


class LlmStep(Generic[OutcomeT]):
    """One llm adapter of a role (`analyzer`, `applier`) whose steps end in an outcome of type `OutcomeT`."""

    def __init__(
        self,
        config: LlmAdapter,
        providers: Providers | None,
        role: str,
        prompt: PromptStep,
        outcome: type[OutcomeT],
    ) -> None:
        check_limits(config, providers.redis if providers is not None else None)
        self._config = config
        self._providers = providers
        self._template: string.Template = load_template(prompt, config.prompts.get(prompt))
        self._outcome = outcome
        self.source = f"llm {role} {config.model}"

    async def _in_session(
        self,
        request: StepRequest,
        answer: AnswerSchema,
        body: Callable[[Session, float], Awaitable[OutcomeT]],
    ) -> OutcomeT:
        """`body` (given the session and when the step started) in a session with the model; a step error
        is the failed outcome."""
        started = time.monotonic()

        def failed(exc: LlmStepError, spent: Usage | None) -> OutcomeT:
            return self._failed(started, str(exc), exc, spent)

        async def step(session: Session) -> OutcomeT:
            return await body(session, started)

        return await in_session(self._config, self._providers, request, answer, step, failed)

    def _failed(
        self, started: float, error: str, down: LlmStepError | None = None, spent: Usage | None = None
    ) -> OutcomeT:
        """The outcome of a step that failed (`error`; `down` the step error, if one ended it)."""
        return self._outcome(exit=step_exit(started, error, down, spent), source=self.source)
