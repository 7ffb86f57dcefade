"""deploy/redis/users.acl, rendered with test passwords and loaded into a real redis-server (plus a
test-only administrator that reads the ACL log), and fleet settings that connect as one of its users."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from pydantic import SecretStr

from service.core.settings import FleetSettings
from tests.support.fleet import settings_env
from tests.support.redis_proc import RedisProcess
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
ACL_DIR = ROOT / "deploy" / "redis"
PASSWORDS = {"worker": "w-pass-1", "submitter": "s-pass-2", "monitor": "m-pass-3", "scaler": "k-pass-5"}
ADMIN = "admin-pass-4"
"""A test-only administrator (appended to the rendered file) reads the ACL log."""


@dataclass
class AclRedis:
    server: RedisProcess

    def url(self, user: str) -> str:
        return f"redis://{user}@127.0.0.1:{self.server.port}/0"

    def client(self, user: str) -> redis.Redis:
        password = ADMIN if user == "admin" else PASSWORDS[user]
        return redis.Redis(port=self.server.port, username=user, password=password)

    def denials(self, user: str) -> list[dict[str, Any]]:
        with self.client("admin") as admin:
            log = cast(list[dict[str, Any]], admin.acl_log())
        return [e for e in log if e["username"] == user]


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[AclRedis]:
    env = {**os.environ, **{f"REDIS_ACL_{u.upper()}_PASSWORD": p for u, p in PASSWORDS.items()}}
    rendered = subprocess.run(
        [str(ACL_DIR / "render-acl.sh"), str(ACL_DIR / "users.acl")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert all(p not in rendered for p in PASSWORDS.values()), "passwords are stored hashed"
    acl = tmp_path / "users.acl"
    acl.write_text(rendered + f"user admin on >{ADMIN} ~* &* +@all\n")
    port = free_port()
    server = RedisProcess(
        tmp_path / "redis",
        port,
        ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--aclfile", str(acl)],
    )
    server.start()
    yield AclRedis(server)
    server.stop()


def role_settings(base: FleetSettings, acl: AclRedis, user: str) -> FleetSettings:
    """The user named in the URL, its password in the password setting (as a deployment would)."""
    update = {"redis_url": acl.url(user), "redis_password": SecretStr(PASSWORDS[user])}
    return base.model_copy(update=update)


def role_env(settings: FleetSettings) -> dict[str, str]:
    return {**os.environ, **settings_env(settings), "TUNEFLEET_LOG_FORMAT": "json"}
