"""`python -m service.watch`: the live terminal view, the same as `tunefleet watch`.

Settings come from the environment (`TUNEFLEET_*`, `TUNEFLEET_CONFIG`), as for every command.
"""

from __future__ import annotations

import asyncio
import sys

from rich.console import Console

from service.core import logs
from service.core.errors import TunefleetError
from service.core.settings import FleetSettings
from service.watch.app import watch


def main() -> int:
    """0 after `q`; 2 when the settings are wrong, Redis is unreachable or there is no terminal."""
    errors = Console(stderr=True)
    try:
        settings = FleetSettings()
    except ValueError as exc:
        errors.print(f"[red]error:[/red] settings: {exc}", highlight=False)
        return 2
    logs.configure(settings.log_format, settings.log_level)
    try:
        asyncio.run(watch(settings))
    except TunefleetError as exc:
        errors.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
