"""The bound on a run's memory (workers/memory_bound.py): a runner that fills its memory past
`memory_max_entries` or `memory_max_mb` ends its case difficult, naming the bound, and the fleet neither
copies that memory into a run nor keeps it; the measure stops at the bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service.core.io.files import read_model
from service.core.io.trees import FolderSize, folder_size
from service.core.models.records import CaseResult
from tests.agents.contract_agent import HOARD_BYTES, HOARD_FILES
from tests.support.fleet import Fleet
from tests.test_command_loop import agent, case_root
from tests.test_seed_semantics import start_case


async def _hoarded(fleet: Fleet, tmp_path: Path, **bound: Any) -> str:
    """One case whose runner passes and hoards files in its memory, under `bound`; its end's reason. The
    (agent) analyzer was given an empty memory folder, not a copy of the hoard."""
    await start_case(fleet, tmp_path, runner=agent("hoard", "run"), **bound)
    await fleet.wait_finished(1)
    result = read_model(case_root(fleet) / "result.json", CaseResult)
    assert result is not None and (result.state, result.phase) == ("difficult", "mem"), result
    assert not [e for e in fleet.events() if e["kind"] == "step_started" and e["phase"] == "mem"]
    assert not (case_root(fleet) / "mem").exists()
    (analyzed,) = case_root(fleet).glob("nomem/1/analyze-*/memory")  # the agent analyzer's own copy
    assert list(analyzed.iterdir()) == []
    assert not list((fleet.settings.store / "tunings" / "t1" / "memories").glob("c1/*"))
    return result.reason or ""


async def test_a_memory_of_too_many_files_ends_the_case_before_any_copy(fleet: Fleet, tmp_path: Path) -> None:
    """A passing run whose memory holds more entries than `memory_max_entries` (here 10, it writes 52):
    the case ends difficult with the bound named; the memory phase never starts and nothing is kept."""
    reason = await _hoarded(fleet, tmp_path, memory_max_entries=10)
    assert reason == (
        "memory too large: the passing run's memory holds more than 10 files, folders and links "
        "(memory_max_entries)"
    )


async def test_a_memory_of_too_many_bytes_ends_the_case_before_any_copy(fleet: Fleet, tmp_path: Path) -> None:
    """A passing run whose memory holds more bytes than `memory_max_mb` (here 0.01 MB, it writes 50 kB):
    the same end, naming that bound."""
    assert HOARD_FILES * HOARD_BYTES > 10_000
    reason = await _hoarded(fleet, tmp_path, memory_max_mb=0.01)
    assert reason == "memory too large: the passing run's memory holds more than 0.01 MB (memory_max_mb)"


def test_the_measure_stops_at_the_bound(tmp_path: Path) -> None:
    """A folder of 5,000 files measured against a bound of 100 entries is counted to 101 and no further;
    one within both bounds is counted whole (entries and bytes)."""
    for n in range(5000):
        (tmp_path / f"{n}.txt").write_bytes(b"ab")
    assert folder_size(tmp_path, max_entries=100, max_bytes=10**9) == FolderSize(101, 202, over=True)
    assert folder_size(tmp_path, max_entries=10**6, max_bytes=10**9) == FolderSize(5000, 10_000, over=False)
