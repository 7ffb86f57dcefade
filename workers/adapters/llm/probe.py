"""Is the provider up? Asked when a call timed out and no other call of the provider answered meanwhile.

"Nobody else was answered" cannot tell a down provider from a slow call when the slow call is the only
one: the last case standing has no other calls to compare with, and was handed back for an outage
forever, paying for each timed-out attempt. So before a timeout counts as an outage the provider is
asked a one-token question, within the call's own `timeout_s` and under the fleet's limits: a provider
that answers it (with anything but a 5xx) is up, and the timeout is the call's own (a strike toward
`timeouts_max`, workers.adapters.llm.client). A one-token completion, not the model list: a server that
is up but too busy to generate would answer a model list at once, and the case would be blamed for it.
"""

from __future__ import annotations

from typing import Any

import openai
import structlog
from openai.types.chat import ChatCompletion

from workers.adapters.llm.limits import ProviderLimits
from workers.adapters.llm.provider import Provider
from workers.adapters.llm.tokens import Meter

log = structlog.get_logger()

QUESTION = [{"role": "user", "content": "Say OK."}]
UNMETERED_TOKENS = 12
"""A probe answered without usage is counted as this many prompt tokens (its message and overhead)."""


async def probe(
    provider: Provider, sdk: openai.AsyncOpenAI, limits: ProviderLimits | None, timeout_s: float, meter: Meter
) -> bool:
    """Whether the provider answered the probe (then it is marked as answered, and what the probe cost
    is counted in `meter`); False when it did not (no connection, a timeout, a 5xx: it is down). A 4xx
    is an answer: a server that refuses the question is up."""
    params: dict[str, Any] = {"model": provider.model, "messages": QUESTION, provider.max_tokens_param: 1}
    try:
        if limits is None:
            completion = await _ask(sdk, params, timeout_s)
        else:
            async with limits.call():
                completion = await _ask(sdk, params, timeout_s)
    except openai.APIStatusError as exc:
        if exc.status_code >= 500:
            log.info("llm_probe_unanswered", provider=provider.id, status=exc.status_code)
            return False
    except openai.APIError as exc:
        log.info("llm_probe_unanswered", provider=provider.id, error=type(exc).__name__)
        return False
    else:
        if not meter.measured(completion):
            meter.estimated(UNMETERED_TOKENS, 1)
    log.info("llm_probe_answered", provider=provider.id)
    await provider.answered()
    return True


async def _ask(sdk: openai.AsyncOpenAI, params: dict[str, Any], timeout_s: float) -> ChatCompletion:
    return await sdk.post(
        "/chat/completions", cast_to=ChatCompletion, body=params, options={"timeout": timeout_s}
    )
