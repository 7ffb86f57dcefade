"""What a command checks before it touches the fleet: its settings, and the address of Redis.

Each mistake becomes one `ConfigError` sentence naming the file, variable or field, so that the
CLI prints one `error:` line instead of a traceback (and nothing is registered or queued).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from service.core.errors import ConfigError
from service.core.settings import CONFIG_ENV, FleetSettings
from service.core.validation import field_problems


def load_settings() -> FleetSettings:
    """The fleet settings from the environment and the settings file, or a ConfigError naming the fault."""
    config = os.environ.get(CONFIG_ENV)
    if config:
        _check_config_file(Path(config))
    try:
        return FleetSettings()
    except ValidationError as exc:
        raise ConfigError(f"settings: {validation_line(exc)}") from None
    except (ValueError, OSError) as exc:
        raise ConfigError(f"settings file {config}: {one_line(str(exc))}") from None


def _check_config_file(path: Path) -> None:
    """A settings file that is missing, unreadable, not YAML or not a mapping is refused by name."""
    import yaml  # only when a settings file is given

    from service.core.io.documents import load_yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"settings file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"settings file {path} cannot be read: {one_line(str(exc))}") from None
    try:
        data = load_yaml(text)  # a bomb refused before pydantic-settings reads it
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"settings file {path} is not valid YAML{where}: {one_line(problem)}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"settings file {path} must hold a mapping of settings, not {type(data).__name__}")


def check_redis_address(settings: FleetSettings) -> None:
    """Refuse a Redis URL or Sentinel address that cannot name a server, before connecting."""
    from service.core.io.connection import redis_settings

    for entry in settings.redis_sentinels:
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"redis_sentinels: {entry!r} is not host:port (a port from 1 to 65535); "
                'set TUNEFLEET_REDIS_SENTINELS as a JSON list such as ["sentinel-1:26379"]'
            )
    try:
        redis_settings(settings)
    except (ValueError, RuntimeError) as exc:
        from service.core.io.connection import safe_url

        raise ConfigError(
            f"redis_url {safe_url(settings.redis_url)!r} is not a Redis URL "
            f"(redis://host:port/db, rediss:// for TLS, unix:///path): {one_line(str(exc))}"
        ) from None


API_TOKEN_MIN_CHARS = 16
"""The shortest API token the daemon serves with: an empty bearer token would match an empty one."""


def check_api_tokens(settings: FleetSettings) -> None:
    """Refuse an API token that is set but empty or shorter than API_TOKEN_MIN_CHARS, before serving."""
    for field in ("api_token", "api_read_token"):
        token = getattr(settings, field)
        if token is None:
            continue
        length = len(token.get_secret_value())
        if length < API_TOKEN_MIN_CHARS:
            what = "is empty" if length == 0 else f"has {length} characters"
            raise ConfigError(
                f"{field} (TUNEFLEET_{field.upper()}) {what}: it needs at least {API_TOKEN_MIN_CHARS} "
                "(make one with `openssl rand -hex 32`), or leave it unset to keep that access closed"
            )


def validation_line(exc: ValidationError) -> str:
    """A settings ValidationError as one line: each field named with what is wrong with it."""
    return "; ".join(
        f"{p.field} (TUNEFLEET_{p.field.split('.')[0].upper()}): {p.expected}"
        for p in field_problems(exc, top="(settings)")
    )


def one_line(text: str) -> str:
    """Text with its line breaks folded into spaces."""
    return " ".join(text.split())
