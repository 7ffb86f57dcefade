"""A body run beside a watchdog (workers.tasks.watched): its error comes out plain, as it was raised."""

from __future__ import annotations

import asyncio

import pytest

from workers.tasks import watched


async def _idle() -> None:
    await asyncio.Event().wait()


async def test_a_bodys_error_comes_out_plain_with_the_cause_it_was_raised_from() -> None:
    """An error the body raises `from` another is raised by `watched` itself, not in a group, and still
    names that cause: a caller that reads why it failed (the LLM client: whether a call reached its
    server) sees what the body saw."""
    cause = ConnectionRefusedError("nobody listens")
    with pytest.raises(TimeoutError) as raised:
        async with watched(_idle()):
            raise TimeoutError("the call failed") from cause
    assert raised.value.__cause__ is cause


async def test_a_watchdogs_error_cancels_the_body_and_comes_out_plain() -> None:
    """When the watchdog fails, the body is cancelled and the watchdog's error is raised plain."""

    async def failing() -> None:
        raise LookupError("the permit was lost")

    body_cancelled = False
    with pytest.raises(LookupError):
        async with watched(failing()):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                body_cancelled = True
                raise
    assert body_cancelled
