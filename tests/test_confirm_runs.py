"""The loop under chance: `confirm_runs` makes a pass stand only once more runs on its version pass, and
a case whose graded runs on one version disagree is recorded `flaky` (docs/configuration.md). Driven by
the demo's `fails` knob (a try that fails whatever the prose holds, as a random agent's does) through
real worker processes and a real Redis."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from service.client.tunings import load_tuning_file
from service.core.errors import ConfigError
from service.core.io.files import read_model
from service.core.models.records import CaseResult
from tests.support.fleet import Fleet, case, write_tuning


def result_of(fleet: Fleet, case_id: str) -> CaseResult:
    found = read_model(
        fleet.settings.store / "tunings" / "t1" / "cases" / case_id / "r1" / "result.json", CaseResult
    )
    assert found is not None
    return found


def tries(fleet: Fleet, case_id: str, phase: str) -> list[str]:
    root = fleet.settings.store / "tunings" / "t1" / "cases" / case_id / "r1" / phase
    return sorted((p.name for p in root.iterdir() if p.name.isdigit()), key=int)


async def test_a_pass_stands_only_once_its_confirmation_runs_pass(fleet: Fleet, tmp_path: Path) -> None:
    """With confirm_runs 2, a first pass whose first confirmation fails does not stand (the failure is a
    try: the phase goes on), the next pass and its two confirmations end the phase, and the case is
    `flaky`: its runs on one version disagreed."""
    cases = [case("lucky", fails=["nomem-2"])]
    tuning = write_tuning(tmp_path / "tuning", cases, confirm_runs=2)
    await fleet.start_tuning(tuning)
    fleet.start_worker(concurrency=2)
    await fleet.wait_finished(1)
    ended = result_of(fleet, "lucky")
    assert ended.state == "completed", ended
    assert tries(fleet, "lucky", "nomem") == ["1", "2", "3", "4", "5"]  # pass, fail (stops), pass, 2 confirm
    assert tries(fleet, "lucky", "mem") == ["1", "2", "3"]
    assert ended.flaky


async def test_the_seed_loop_is_unchanged_and_flaky_is_recorded(fleet: Fleet, tmp_path: Path) -> None:
    """Without confirm_runs one pass ends a phase as in the seed's loop; a case that failed by chance
    and then passed on the same version is `flaky` in its result and in `results`; one that always
    passed is not."""
    cases = [case("steady"), case("chance", fails=["nomem-1"]), case("unlucky-later", fails=["nomem-2"])]
    tuning = write_tuning(tmp_path / "tuning", cases)
    await fleet.start_tuning(tuning)
    fleet.start_worker(concurrency=3)
    rows = await fleet.wait_finished(3)
    assert tries(fleet, "steady", "nomem") == ["1"] and tries(fleet, "unlucky-later", "nomem") == ["1"]
    assert tries(fleet, "chance", "nomem") == ["1", "2"]
    assert {name: row.flaky for name, row in rows.items()} == {
        "steady": False,
        "chance": True,
        "unlucky-later": False,
    }


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"confirm_runs": -1}, "confirm_runs"),
        ({"confirm_runs": 2, "confirm_min_passes": 3}, "confirm_min_passes"),
        ({"confirm_runs": 2, "confirm_min_passes": 0}, "confirm_min_passes"),
        ({"confirm_runs": "many"}, "confirm_runs"),
    ],
)
def test_bad_confirm_values_are_refused_naming_the_field(
    tmp_path: Path, fields: dict[str, object], expected: str
) -> None:
    """Each bad value of the confirmation fields is refused in one line that names the field."""
    path = write_tuning(tmp_path / "tuning", [case("c1")])
    config = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**config, **fields}))
    with pytest.raises(ConfigError) as refused:
        load_tuning_file(path)
    message = str(refused.value)
    assert expected in message and "\n" not in message.strip(), message
