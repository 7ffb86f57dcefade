"""The CLI and the settings as deploy files use them: does an argv parse as a subcommand, is a
TUNEFLEET_* variable a setting, what is a setting's default."""

from __future__ import annotations

from typing import Any

import typer

from service.cli.main import app
from service.core.settings import FleetSettings

PENDING_SETTINGS = {"health_host": "127.0.0.1", "health_port": 0, "api_public_read": False}
"""Settings (with their defaults) that branches merged beside this one add: the health endpoints and
public reads. The deploy files use them already; once FleetSettings has them, these entries are not
consulted."""


def cli_group() -> Any:
    """The CLI's command group (typer's own vendored click group; its subcommands are `.commands`)."""
    return typer.main.get_command(app)


def cli_commands() -> dict[str, Any]:
    commands = getattr(cli_group(), "commands", None)
    assert isinstance(commands, dict) and commands, "service.cli.main.app has no subcommands"
    return commands


def argv_problems(argv: list[str]) -> list[str]:
    """Why `tunefleet <argv>` would not parse (an unknown subcommand, a bad option); [] when it would."""
    commands = cli_commands()
    command = commands.get(argv[0]) if argv else None
    if command is None:
        return [f"`tunefleet {' '.join(argv)}` is not a subcommand (known: {', '.join(sorted(commands))})"]
    try:
        parent = typer.Context(cli_group(), info_name="tunefleet")
        command.make_context(argv[0], list(argv[1:]), parent=parent)
    except (typer.TyperException, typer.Exit) as exc:
        return [f"`tunefleet {' '.join(argv)}` does not parse: {exc}"]
    return []


def is_setting(variable: str) -> bool:
    """Whether an environment variable names a fleet setting (TUNEFLEET_<FIELD>)."""
    field = variable.removeprefix("TUNEFLEET_").lower()
    known = field in FleetSettings.model_fields or field in PENDING_SETTINGS
    return variable.startswith("TUNEFLEET_") and known


def setting_default(name: str) -> Any:
    field = FleetSettings.model_fields.get(name)
    return field.default if field is not None else PENDING_SETTINGS[name]
