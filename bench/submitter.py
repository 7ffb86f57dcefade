"""A submitting process of the queue benchmark: `python -m bench.submitter TUNING PREFIX COUNT` submits
COUNT simple cases through TunefleetClient.submit_many, as `tunefleet submit` does (settings from
TUNEFLEET_*); prints how many were accepted."""

from __future__ import annotations

import asyncio
import sys

from bench.common import simple_cases
from service.client.client import TunefleetClient
from service.core import logs
from service.core.models.case import Case
from service.core.settings import FleetSettings


async def submit(tuning: str, prefix: str, count: int) -> int:
    cases = [Case.model_validate(item) for item in simple_cases(count, prefix=prefix)]
    async with TunefleetClient(FleetSettings()) as client:
        return sum(await client.submit_many(tuning, cases))


if __name__ == "__main__":
    logs.configure("console", "warning")
    print(asyncio.run(submit(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
