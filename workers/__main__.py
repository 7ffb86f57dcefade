"""`python -m workers` (what `tunefleet worker` becomes): one worker process."""

from __future__ import annotations

import argparse
import asyncio
import sys

from pydantic import ValidationError

from service import logs
from service.errors import TunefleetError
from service.settings import FleetSettings
from workers.main import run_worker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tunefleet worker", description="Claim cases and run the loop.")
    parser.add_argument("--concurrency", type=int, help="cases this process runs at once")
    parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    args = parser.parse_args(argv)
    try:
        settings = FleetSettings()
    except ValidationError as exc:
        print(f"error: settings: {exc}", file=sys.stderr)
        return 2
    if args.concurrency is not None:
        settings = settings.model_copy(update={"concurrency": args.concurrency})
    logs.configure(settings.log_format, settings.log_level)
    try:
        asyncio.run(run_worker(settings, burst=args.burst))
    except TunefleetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
