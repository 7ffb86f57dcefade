"""`python -m workers` (what `tunefleet worker` becomes): one worker process."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from pydantic import ValidationError

from service.core import logs
from service.core.errors import TunefleetError
from service.core.settings import FleetSettings
from service.core.startup import check_redis_address, load_settings, validation_line
from workers.main import run_worker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tunefleet worker", description="Claim cases and run the loop.")
    parser.add_argument("--concurrency", type=int, help="cases this process runs at once")
    parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        if args.concurrency is not None:
            settings = FleetSettings.model_validate(
                {**settings.model_dump(), "concurrency": args.concurrency}
            )
        check_redis_address(settings)
    except ValidationError as exc:
        return _error(f"--concurrency: {validation_line(exc)}")
    except TunefleetError as exc:
        return _error(str(exc))
    logs.configure(settings.log_format, settings.log_level)
    watch_children_by_pidfd()
    try:
        asyncio.run(run_worker(settings, burst=args.burst))
    except TunefleetError as exc:
        return _error(str(exc))
    return 0


def watch_children_by_pidfd() -> None:
    """Wait for child processes (git, agents' keepers) on the event loop through a pidfd, as Python 3.12
    does by default, where Linux has them. Python 3.11's default waits for each from a thread started for
    it (ThreadedChildWatcher): about a tenth of a worker's CPU in `bench overhead`, whose applies start
    seven git processes each."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # an older kernel, or a sandbox without the call
        return
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())


def _error(message: str) -> int:
    """One error line (a JSON record when logs render as JSON), exit code 2; as `tunefleet worker` does."""
    text = " ".join(message.split())
    if logs.renders_json(os.environ.get("TUNEFLEET_LOG_FORMAT", "auto")):
        logs.error_record(text)
    else:
        print(f"error: {text}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
