"""What a folder holds on disk, as gc and its tests count it."""

from __future__ import annotations

import os
from pathlib import Path


def disk_use(root: Path) -> tuple[int, int]:
    """The bytes of regular files and the count of entries under `root`."""
    size = inodes = 0
    for folder, dirs, files in os.walk(root):
        inodes += len(dirs) + len(files)
        size += sum(os.lstat(os.path.join(folder, name)).st_size for name in files)
    return size, inodes
