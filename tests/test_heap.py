"""A process's long-lived objects leave the garbage collector's full passes (service.core.io.heap), and no
garbage is kept for ever with them."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

from service.core.settings import FleetSettings
from service.daemon.main import run_daemon
from tests.support.fleet import write_tuning

PROBE = """
import gc, json, weakref
from service.core.io.heap import freeze_long_lived

class Node:
    pass

kept = Node()
garbage = Node()
garbage.me = garbage  # a cycle: only a collection frees it
dead = weakref.ref(garbage)
del garbage
before = gc.get_freeze_count()
freeze_long_lived()
print(json.dumps({
    "frozen": gc.get_freeze_count() - before,
    "kept_frozen": not any(o is kept for o in gc.get_objects()),
    "garbage_freed": dead() is None,
}))
"""


def test_a_freeze_exempts_what_lives_and_frees_the_garbage_first() -> None:
    """After `freeze_long_lived`, an object still referenced is in the permanent generation (no pass walks
    it: `gc.get_objects` no longer lists it), and a garbage cycle made before it was collected, not
    frozen for the life of the process. In a process of its own: a freeze lasts until the process ends."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["frozen"] > 0
    assert got["kept_frozen"] is True
    assert got["garbage_freed"] is True


async def test_the_daemon_freezes_what_its_start_made(settings: FleetSettings, tmp_path: Path) -> None:
    """`tunefleet daemon` exempts what its start made (its client, its modules, the tunings it registered)
    from the full passes once its tunings are registered, as a worker does once it is up: the daemon's
    loop serves the API and renews its lease between passes that walk only what came since."""
    before = gc.get_freeze_count()
    try:
        await run_daemon(settings, [write_tuning(tmp_path / "t", [])], once=True)
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()  # this test's process is not the daemon's
