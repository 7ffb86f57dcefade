"""A real small file system for the tests of a full store: a tmpfs of a few megabytes, mounted for the
test and unmounted after. Mounting needs root (CAP_SYS_ADMIN): `.ci/run` runs `make test` as root on
the CI machine, which provides it; where the mount is refused the test is skipped, and under CI=true it
fails instead, so that a CI that lost the capability does not pass by skipping."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

CHUNK_BYTES = 1 << 20


@contextlib.contextmanager
def small_disk(mount: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of `size_mb` MB mounted at `mount` for the block's length."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        why = f"cannot mount a tmpfs at {mount}: {done.stderr.strip() or done.returncode}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> int:
    """Write `path` until the disk refuses more (ENOSPC); the bytes written."""
    written = 0
    with path.open("wb", buffering=0) as file:
        while True:
            try:
                count = file.write(b"\0" * CHUNK_BYTES)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return written
            written += count or 0
            if not count:
                return written
