"""Atomic file writes and validated reads: the only way tunefleet touches its JSON files."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from service.core.errors import StoreError
from service.core.io.durable import write_all
from service.core.io.durable import (
    write_atomic as write_atomic,  # the way the rest of tunefleet writes a file
)
from service.core.validation import describe_validation

M = TypeVar("M", bound=BaseModel)


REGULAR_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""A folder opened to open its entries relative to it (`dir_fd`); a link in its place is not followed."""


class NotRegularFile(ValueError):
    """A file that is read only as a regular file of its own is something else: a symbolic link (never
    followed), a named pipe, a device or a folder."""


def open_regular(path: Path | str, dir_fd: int | None = None) -> io.BufferedReader | None:
    """`path` (relative to the folder `dir_fd`, if given) open for reading when it is a regular file;
    None when there is nothing there; NotRegularFile, naming it, when it is a link (not followed),
    a pipe, a device or a folder; OSError when it cannot be read. It never blocks (a pipe with no
    writer). For files an agent could have put there: a link could name any file the reader can read."""
    name = os.path.basename(path)
    try:
        fd = os.open(path, REGULAR_READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(f"{name} is a symbolic link (not followed)") from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegularFile(f"{name} is not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def write_temp(folder: Path, name: str, data: bytes) -> str:
    """The first half of an atomic write, without its fsync: `data` in a new temp file `.<name>...tmp`
    in `folder`, which must exist; the temp file's name. `publish_temps` ends several such writes at once."""
    tmp = f"{folder}/.{name}.{os.getpid()}.{threading.get_native_id()}.{time.monotonic_ns()}.tmp"
    return _fill_temp(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), tmp, data)


def _fill_temp(fd: int, tmp: str, data: bytes) -> str:
    """Write `data` into the new temp file `tmp` (open as `fd`) and close it; `tmp`. The file is removed
    when that fails."""
    try:
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def sync_filesystem(path: Path) -> bool:
    """Flush to disk everything written so far to the filesystem holding `path`, files and folders alike
    (syncfs(2), one device flush); False, doing nothing, where the C library has no syncfs."""
    syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if syncfs is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(path))
    finally:
        os.close(fd)
    return True


def _make_folder(folder: str) -> None:
    """Make `folder` and whichever of its parents are missing (one call when only it is missing)."""
    try:
        os.mkdir(folder)
    except FileExistsError:
        pass
    except FileNotFoundError:
        _make_folder(os.path.dirname(folder))
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder)


def publish_temps(temps: Sequence[tuple[str, Path]], filesystem: Path) -> None:
    """End the atomic writes begun with `write_temp` (temp file, final path, on the same filesystem) with
    one flush for all: the temp files' contents reach the disk (`sync_filesystem` on `filesystem`), then
    each takes its name (its folder made when missing), then the folders and names reach the disk too.
    When this returns each file is whole and durable under its name; a crash before leaves some of them
    missing, never one in part, and a failure leaves no temp file. Without syncfs each temp file is
    fsync'd before its rename, as `write_atomic` does (and the names are not flushed)."""
    if not temps:
        return
    named = 0
    try:
        if not sync_filesystem(filesystem):
            for tmp, _ in temps:
                fsync_file(tmp)
        for tmp, path in temps:
            _make_folder(os.path.dirname(path))
            os.replace(tmp, path)
            named += 1
        sync_filesystem(filesystem)
    except BaseException:
        for tmp, _ in temps[named:]:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


def fsync_file(path: str) -> None:
    """Flush one file's content to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def model_bytes(model: BaseModel) -> bytes:
    """A model as `write_model` writes it."""
    return (model.model_dump_json(indent=2) + "\n").encode()


def write_model(path: Path, model: BaseModel) -> None:
    write_atomic(path, model_bytes(model))


def write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    write_atomic(path, (json.dumps(data, indent=2, default=str) + "\n").encode(), durable=durable)


def read_model(path: Path, model: type[M]) -> M | None:
    """The validated model in `path`, None if the file does not exist; StoreError if it is invalid."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc}") from exc
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise StoreError(describe_validation(exc, path)) from exc


def require_model(path: Path, model: type[M], missing: Callable[[], Exception]) -> M:
    """The validated model in `path`; the error `missing()` makes if the file does not exist (StoreError
    if it is invalid, as `read_model`)."""
    found = read_model(path, model)
    if found is None:
        raise missing()
    return found


def append_line(path: Path, line: str) -> None:
    """Append one line with a single write on an O_APPEND descriptor (whole lines, never interleaved)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
    finally:
        os.close(fd)
