"""The llm benchmark's baselines, each run in a process of its own (`python -m bench.llm_baseline`), with
the requests the fleet sent (the same prompts and schemas), through one `openai.AsyncOpenAI` client:

- `replay`: every request on its own, `concurrency` at a time, in the order the fleet sent them: the
  server's throughput with nothing between calls and no order among them.
- `cases`: the same calls as the fleet's loop would make them with no cost of its own: `slots` lanes
  take the cases in order; each case makes its calls one after the other (every analysis follows a
  run, here of no time); an apply holds a lock (one at a time, as the improvements lock); a run start
  waits for the applies pending when it comes (the fleet's `wait_for_apply`); at most `concurrency`
  calls at once (the provider's permits). The fleet does all of this too: what it adds beyond this
  baseline is its own time (records, events, leases, prompts, files, the scheduler).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import deque
from pathlib import Path
from typing import Any

import openai

APPLY = "edits"
"""The response schema's name of an apply's call (an analysis asks for `feedback`)."""


def _client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="no-key", base_url=base_url, max_retries=0, timeout=30)


async def replay(base_url: str, concurrency: int, bodies: list[dict[str, Any]], per_call: bool) -> None:
    """Every request on its own, `concurrency` at a time; `per_call`: a new client for each."""
    queue = deque(bodies)
    async with _client(base_url) as shared:

        async def lane() -> None:
            while queue:
                body = queue.popleft()
                if not per_call:
                    await shared.chat.completions.create(**body)
                    continue
                async with _client(base_url) as own:
                    await own.chat.completions.create(**body)

        await asyncio.gather(*(lane() for _ in range(concurrency)))


class _Applies:
    """The applies waiting for the lock or holding it, and the run starts that wait for them."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.pending: set[int] = set()
        self.changed = asyncio.Condition()
        self._next = 0

    def mark(self) -> int:
        self._next += 1
        self.pending.add(self._next)
        return self._next

    async def done(self, mark: int) -> None:
        self.pending.discard(mark)
        async with self.changed:
            self.changed.notify_all()

    async def run_start(self) -> None:
        """Wait for the applies pending now (not for those that come meanwhile)."""
        waiting = set(self.pending)
        async with self.changed:
            await self.changed.wait_for(lambda: not waiting & self.pending)


async def cases(
    base_url: str,
    slots: int,
    concurrency: int,
    calls_by_case: list[list[dict[str, Any]]],
    wait_for_apply: bool,
) -> None:
    """The cases' calls as a cost-free loop makes them (see the module's docstring); `wait_for_apply`
    False: run starts do not wait for the pending applies."""
    queue = deque(calls_by_case)
    permits = asyncio.Semaphore(concurrency)
    applies = _Applies()
    async with _client(base_url) as client:

        async def call(body: dict[str, Any]) -> None:
            async with permits:
                await client.chat.completions.create(**body)

        async def lane() -> None:
            while queue:
                for body in queue.popleft():
                    if body["response_format"]["json_schema"]["name"] != APPLY:
                        if wait_for_apply:
                            await applies.run_start()
                        await call(body)
                        continue
                    mark = applies.mark()
                    try:
                        async with applies.lock:
                            await call(body)
                    finally:
                        await applies.done(mark)

        await asyncio.gather(*(lane() for _ in range(slots)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.llm_baseline")
    parser.add_argument("mode", choices=["replay", "replay-per-call", "cases"])
    parser.add_argument("base_url")
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--slots", type=int, default=0, help="lanes (cases): the fleet's worker slots")
    parser.add_argument("--no-wait-for-apply", action="store_true", help="cases: run starts never wait")
    parser.add_argument("calls", type=Path, help="JSON: the bodies (replay), or a list per case (cases)")
    args = parser.parse_args(argv)
    calls = json.loads(args.calls.read_text())
    began = time.monotonic()
    cpu0 = time.process_time()
    if args.mode == "cases":
        asyncio.run(cases(args.base_url, args.slots, args.concurrency, calls, not args.no_wait_for_apply))
    else:
        asyncio.run(replay(args.base_url, args.concurrency, calls, per_call=args.mode == "replay-per-call"))
    cpu_s = time.process_time() - cpu0
    print(json.dumps({"seconds": time.monotonic() - began, "cpu_s": cpu_s}))


if __name__ == "__main__":
    main()
