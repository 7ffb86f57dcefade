"""`tunefleet watch` for real: the command runs in a tmux pane (a real terminal) while a real worker
process runs a slow demo tuning; the test types keys into the pane and reads the screen back."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.core.settings import FleetSettings
from tests.support.fleet import Fleet, case, demo_adapter, settings_env, wait_until, write_tuning
from tests.support.tools import require_tool

REPO = Path(__file__).resolve().parents[1]
SESSION = "watch"
COLUMNS = 120
ROWS = 40
SCREEN_TIMEOUT_S = 30.0


def watch_argv() -> list[str]:
    """`python -m service watch` once the CLI has the command, else the package's own entry point."""
    from service.cli.main import app

    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    module = ["service", "watch"] if "watch" in names else ["service.watch"]
    return [sys.executable, "-m", *module]


class Pane:
    """One tmux pane running a plain shell, on a tmux server of its own (a private socket)."""

    def __init__(self, binary: str, socket: Path) -> None:
        self.binary = binary
        self.socket = socket
        self.screen = ""

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            [self.binary, "-S", str(self.socket), *args], capture_output=True, text=True, check=True
        )
        return done.stdout

    def type_line(self, text: str) -> None:
        self.tmux("send-keys", "-t", SESSION, "-l", text)
        self.tmux("send-keys", "-t", SESSION, "Enter")

    def press(self, key: str) -> None:
        self.tmux("send-keys", "-t", SESSION, key)

    def shell_children(self) -> list[int]:
        """The processes the pane's shell started (the command running in the foreground)."""
        shell_pid = int(self.tmux("display-message", "-p", "-t", SESSION, "#{pane_pid}").strip())
        children = Path(f"/proc/{shell_pid}/task/{shell_pid}/children")
        return [int(pid) for pid in children.read_text().split()] if children.exists() else []

    def capture(self) -> str:
        self.screen = self.tmux("capture-pane", "-p", "-t", SESSION)
        return self.screen

    async def wait_for(self, check: Callable[[str], bool], what: str) -> str:
        """Poll the screen until `check` holds; on timeout fail showing the last screen."""
        try:
            await wait_until(lambda: check(self.capture()), SCREEN_TIMEOUT_S, what, interval_s=0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen was:\n{self.screen}") from None
        return self.screen


@pytest.fixture
def pane(settings: FleetSettings, tmp_path: Path) -> Iterator[Pane]:
    binary = require_tool("tmux")  # the watch needs a real terminal
    socket = tmp_path / "tmux.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "TUNEFLEET_"))}
    env |= settings_env(settings) | {"TUNEFLEET_LOG_FORMAT": "json", "LANG": "C.UTF-8"}
    size = ["-x", str(COLUMNS), "-y", str(ROWS)]
    shell = "bash --norc --noprofile --noediting"
    # This starts the private tmux server with `env`, which the pane's shell inherits.
    subprocess.run(
        [binary, "-S", str(socket), "new-session", "-d", "-s", SESSION, *size, "-c", str(REPO), shell],
        env=env,
        check=True,
    )
    try:
        yield Pane(binary, socket)
    finally:
        subprocess.run([binary, "-S", str(socket), "kill-server"], capture_output=True, check=False)


def selected_row(screen: str) -> str:
    return next((row for row in screen.splitlines() if row.startswith(">")), "")


def exit_status(screen: str) -> int | None:
    """The status the shell echoed after the watch ended, None while it runs."""
    found = re.search(r"^watch-exit=(\d+)$", screen, re.MULTILINE)
    return int(found.group(1)) if found else None


def stty_flags(screen: str) -> set[str]:
    return set(re.split(r"[\s;]+", screen))


async def test_watch_shows_the_fleet_follows_an_agent_and_gives_the_terminal_back(
    fleet: Fleet, pane: Pane, tmp_path: Path
) -> None:
    """The watch shows the queue and the case under way, follows its agent's log, goes back, quits cleanly."""
    cases = [case("slow-a"), case("slow-b"), case("slow-c")]
    tuning = write_tuning(tmp_path / "tuning", cases, adapter=demo_adapter(run_ms=4000))
    await fleet.start_tuning(tuning)
    fleet.start_worker(concurrency=1)
    pane.type_line(f"{shlex.join(watch_argv())}; echo watch-exit=$?")

    screen = await pane.wait_for(
        lambda s: "queue 2" in s and re.search(r"slow-\w r1 +nomem/1 +run", selected_row(s)) is not None,
        "the overview with two cases queued and one run under way",
    )
    assert "under way 1" in screen and "latest events" in screen and "tokens" in screen
    running_case = re.findall(r"slow-\w", selected_row(screen))[0]

    pane.press("Down")
    pane.press("Enter")
    screen = await pane.wait_for(
        lambda s: (
            re.search(rf"^demo-run: case {running_case} (nomem|mem) try 1$", s, re.MULTILINE) is not None
        ),
        f"the follow view showing {running_case}'s run log",
    )
    assert screen.splitlines()[0].startswith(f"follow t1 / {running_case} r1")
    assert "latest events" not in screen

    pane.press("Escape")
    await pane.wait_for(lambda s: "latest events" in s and "under way" in s, "the overview again")

    pane.press("q")
    screen = await pane.wait_for(lambda s: exit_status(s) == 0, "the watch to exit with status 0")
    assert "latest events" not in screen  # the alternate screen is gone: the shell's screen is back
    pane.type_line("stty -a")
    screen = await pane.wait_for(lambda s: "icanon" in stty_flags(s), "stty to report the terminal settings")
    flags = stty_flags(screen)
    assert {"icanon", "echo"} <= flags and not {"-icanon", "-echo"} & flags


async def test_sigterm_ends_the_watch_and_gives_the_terminal_back(
    settings: FleetSettings, pane: Pane
) -> None:
    """SIGTERM to a running watch leaves the alternate screen and restores the terminal's settings."""
    pane.type_line(f"{shlex.join(watch_argv())}; echo watch-exit=$?")
    await pane.wait_for(lambda s: s.startswith("tunefleet watch") and "under way" in s, "the overview")
    (watch_pid,) = pane.shell_children()
    os.kill(watch_pid, signal.SIGTERM)
    screen = await pane.wait_for(lambda s: exit_status(s) is not None, "the watch to exit")
    assert exit_status(screen) == 0 and "under way" not in screen
    pane.type_line("stty -a")
    screen = await pane.wait_for(lambda s: "icanon" in stty_flags(s), "stty to report the terminal settings")
    flags = stty_flags(screen)
    assert {"icanon", "echo"} <= flags and not {"-icanon", "-echo"} & flags
