"""Why an LLM step could not get an answer; each message is what the step reports as its error.

    LlmStepError
    ├── MissingApiKey         the variable named by `api_key_env` is not set on this worker
    ├── ProviderAuthFailed    the server refused the key (401, 403): not tried again
    ├── ProviderRejected      the server refused the request itself (another 4xx)
    │   ├── FormatRefused     ... because of its response format (a 4xx or 5xx that says so)
    │   └── ParamRefused      ... because of `max_tokens` (a 400 that names it: send max_completion_tokens)
    ├── CallTimedOut          one call timed out again and again while the provider answered others
    └── ProviderUnavailable   429, 5xx, timeouts or no connection, still so after every attempt

The openai SDK's exceptions are translated into these where the call is made (workers.adapters.llm.client);
no message ever holds the key. Each says how it ends the step (`ends_as`), the field of the step's exit
that carries its message, the same for every role: the provider down (`provider_down`: no try spent, the
job is handed back), a refused key (`key_refused`: the tuning is held), a missing key variable (`void`:
a void try), or the step's own `error`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

StepEnd = Literal["provider_down", "key_refused", "void", "error"]


class LlmStepError(Exception):
    """An LLM step got no usable answer from its provider."""

    ends_as: ClassVar[StepEnd] = "error"


class MissingApiKey(LlmStepError):
    """The key's environment variable is not set."""

    ends_as = "void"


class ProviderAuthFailed(LlmStepError):
    """The provider refused the key."""

    ends_as = "key_refused"


class ProviderRejected(LlmStepError):
    """The provider refused the request (a 4xx other than 401, 403, 408, 409, 429)."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


class FormatRefused(ProviderRejected):
    """The provider refused the request's `response_format` (the negotiation tries the next one)."""


class ParamRefused(ProviderRejected):
    """The provider refused `max_tokens` (OpenAI's reasoning models want `max_completion_tokens`)."""


class CallTimedOut(LlmStepError):
    """The same call timed out `timeouts_max` times while the provider answered other calls: this
    step's own fault (its prompt, its answer), not an outage; the step fails."""


class ProviderUnavailable(LlmStepError):
    """The provider stayed rate-limited, failing or unreachable through every attempt."""

    ends_as = "provider_down"
