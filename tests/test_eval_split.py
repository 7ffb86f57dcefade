"""A tuning's held-out split: drawn once and kept, refused when it cannot be drawn, and never submitted
as a case to tune on."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from service.client.client import TunefleetClient
from service.core.errors import TunefleetError
from service.core.settings import FleetSettings
from service.kinds.evals.split import held_out_ids, read_split
from tests.support.fleet import case, write_tuning

CASES = [case(f"c{i:02d}") for i in range(10)]


async def test_a_fraction_is_drawn_once_and_kept(settings: FleetSettings, tmp_path: Path) -> None:
    """A fraction of 0.3 of 10 cases holds out exactly 3, the same 3 at every registration, and they are
    never submitted: the daemon's submission reports them as held out."""
    tuning_file = write_tuning(tmp_path / "t", CASES, holdout={"fraction": 0.3, "seed": 5})
    async with TunefleetClient(settings) as client:
        await client.register(tuning_file)
        tuning = client.tuning_store("t1")
        first = held_out_ids(tuning)
        assert len(first) == 3
        await client.register(tuning_file)
        assert held_out_ids(tuning) == first
        report = await client.submit_path("t1", tmp_path / "t" / "cases")
        assert sorted(report.held_out) == sorted(f"{c}@1" for c in first)
        assert len(report.accepted) == 7
        submitted = {c.case_id for c in tuning.latest_revs()}
        assert submitted.isdisjoint(first)


async def test_another_seed_draws_another_split(settings: FleetSettings, tmp_path: Path) -> None:
    """The seed decides the draw: two seeds give two different held-out sets over the same cases."""
    draws = []
    for seed in (1, 2):
        root = tmp_path / f"s{seed}"
        tuning_file = write_tuning(root, CASES, name=f"t{seed}", holdout={"fraction": 0.5, "seed": seed})
        async with TunefleetClient(settings) as client:
            await client.register(tuning_file)
            draws.append(held_out_ids(client.tuning_store(f"t{seed}")))
    assert draws[0] != draws[1]
    assert len(draws[0]) == len(draws[1]) == 5


async def test_a_kept_split_cannot_change(settings: FleetSettings, tmp_path: Path) -> None:
    """Registering the tuning again with another seed is refused in one line naming the field: its train
    cases were tuned on."""
    tuning_file = write_tuning(tmp_path / "t", CASES, holdout={"fraction": 0.3, "seed": 5})
    async with TunefleetClient(settings) as client:
        await client.register(tuning_file)
        body = yaml.safe_load(tuning_file.read_text())
        body["holdout"]["seed"] = 6
        tuning_file.write_text(yaml.safe_dump(body))
        with pytest.raises(
            TunefleetError, match=r"field 'holdout': the split was drawn with fraction 0.3, seed 5"
        ):
            await client.register(tuning_file)


@pytest.mark.parametrize(
    ("holdout", "message"),
    [
        ({"fraction": 0.01}, r"field 'holdout.fraction': 0.01 of 10 cases .* makes an empty split"),
        ({"fraction": 0.97}, r"field 'holdout.fraction': 0.97 of 10 cases .* makes an empty split"),
        ({"fraction": 1.5}, r"holdout.fraction.*less than 1"),
        ({"fraction": 0}, r"holdout.fraction.*expected more than 0, not 0"),
        ({"fraction": 0.3, "cases": "held"}, r"either `fraction`.*or `cases`"),
    ],
)
async def test_a_split_that_cannot_be_drawn_registers_nothing(
    settings: FleetSettings, tmp_path: Path, holdout: dict[str, object], message: str
) -> None:
    """A fraction outside (0, 1), or one that leaves a side empty, is one error naming the file and the
    field; the tuning is not registered."""
    tuning_file = write_tuning(tmp_path / "t", CASES, holdout=holdout)
    async with TunefleetClient(settings) as client:
        with pytest.raises(TunefleetError, match=message) as caught:
            await client.register(tuning_file)
        assert str(tuning_file) in str(caught.value)
        assert "\n" not in str(caught.value)
        assert client.store.tuning_names() == []


async def test_a_held_out_folder_must_not_share_ids_with_the_train_cases(
    settings: FleetSettings, tmp_path: Path
) -> None:
    """A held-out folder holding a train case's id is refused, naming the id; a clean one is the split."""
    root = tmp_path / "t"
    tuning_file = write_tuning(root, CASES, holdout={"cases": "held"})
    (root / "held").mkdir()
    (root / "held" / "c03.yaml").write_text(yaml.safe_dump(case("c03")))
    async with TunefleetClient(settings) as client:
        with pytest.raises(
            TunefleetError, match=r"field 'holdout.cases': case id 'c03' .* both held out and a train"
        ):
            await client.register(tuning_file)
        (root / "held" / "c03.yaml").unlink()
        (root / "held" / "h1.yaml").write_text(yaml.safe_dump(case("h1")))
        await client.register(tuning_file)
        split = read_split(client.tuning_store("t1"))
        assert split is not None and split.ids == ["h1"] and len(split.train) == 10


async def test_a_held_out_case_submitted_by_hand_is_not_enqueued(
    settings: FleetSettings, tmp_path: Path
) -> None:
    """`submit` of a held-out case, alone or in a batch, enqueues nothing for it: it is never tuned on."""
    tuning_file = write_tuning(tmp_path / "t", CASES, holdout={"fraction": 0.3, "seed": 5})
    async with TunefleetClient(settings) as client:
        await client.register(tuning_file)
        held = sorted(held_out_ids(client.tuning_store("t1")))
        from service.core.models.case import Case

        one = Case.model_validate(case(held[0]))
        other = Case.model_validate(case("fresh"))
        assert await client.submit("t1", one) is False
        assert await client.submit_many("t1", [one, other]) == [False, True]
        assert await client.redis.zcard(settings.queue) == 1
        assert not (client.tuning_store("t1").cases_dir / held[0]).exists()
