"""An evaluation's results and comparisons, read from item folders as the fleet writes them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.core.models.records import Usage
from service.kinds.evals.compare import chance_line, compare
from service.kinds.evals.models import EvalCaseRef, EvalSpec, ItemResult
from service.kinds.evals.results import read_results
from service.kinds.evals.store import EvalStore

VERSION = "a" * 40


def make_eval(root: Path, eval_id: str, cases: list[str], repeats: int) -> EvalStore:
    store = EvalStore(root / eval_id)
    store.write_spec(
        EvalSpec(
            id=eval_id,
            tuning="t1",
            version_asked="main",
            version=VERSION,
            source="all",
            cases=[EvalCaseRef(id=case, rev=1) for case in cases],
            repeats=repeats,
            created_at=datetime.now(UTC),
        )
    )
    return store


def end_item(store: EvalStore, case: str, repeat: int, outcome: str, **fields: object) -> None:
    """Write an item's outcome as a worker does: `pass`, `fail`, `failed` (infrastructure) or `cancelled`."""
    item = store.item(case, 1, repeat)
    item.root.mkdir(parents=True, exist_ok=True)
    graded = outcome in ("pass", "fail")
    item.write_outcome(
        ItemResult.model_validate(
            {
                "case": case,
                "rev": 1,
                "repeat": repeat,
                "state": "graded" if graded else outcome,
                "verdict": outcome if graded else None,
                "version": VERSION,
                "at": datetime.now(UTC),
                "usage": Usage(input_tokens=70, output_tokens=30, cost_usd=0.001),
                **fields,
            }
        )
    )


def test_pass_rate_counts_graded_items_only(tmp_path: Path) -> None:
    """Passed / graded with its Wilson interval; an item failed for infrastructure is left out and
    listed apart, and its tokens still count."""
    store = make_eval(tmp_path, "e1", ["a", "b", "c", "d"], 1)
    end_item(store, "a", 1, "pass", rubric={"x": 1.0, "y": 0.5})
    end_item(store, "b", 1, "pass", rubric={"x": 1.0, "y": 1.0})
    end_item(store, "c", 1, "fail", rubric={"x": 0.0, "y": 0.0})
    end_item(store, "d", 1, "failed", reason="3 void runs in a row", voids=3)
    results = read_results(store)
    assert (results.graded, results.passed, results.failed, results.done, results.status) == (
        3,
        2,
        1,
        4,
        "finished",
    )
    assert results.rate.rate == pytest.approx(2 / 3)
    assert (round(results.rate.low, 4), round(results.rate.high, 4)) == (0.2077, 0.9385)
    assert results.rubric == {"x": pytest.approx(2 / 3), "y": pytest.approx(0.5)}
    assert [(f.case, f.repeat, f.reason) for f in results.infra] == [("d", 1, "3 void runs in a row")]
    assert results.usage.tokens == 400 and results.usage.cost_usd == pytest.approx(0.004)
    assert [row.outcome for row in results.cases] == ["pass", "pass", "fail", "failed"]


def test_repeats_give_pass_fractions_and_flaky_cases(tmp_path: Path) -> None:
    """With 3 repeats a case that passed some and failed others is flaky, with its pass fraction."""
    store = make_eval(tmp_path, "e1", ["steady", "shaky", "never"], 3)
    for k in (1, 2, 3):
        end_item(store, "steady", k, "pass")
        end_item(store, "never", k, "fail")
    end_item(store, "shaky", 1, "pass")
    end_item(store, "shaky", 2, "fail")
    results = read_results(store)
    rows = {row.case: row for row in results.cases}
    assert rows["shaky"].outcome == "flaky" and rows["shaky"].pass_fraction == 0.5
    assert rows["shaky"].pending == 1 and results.status == "running"
    assert results.flaky == ["shaky"]
    assert (rows["steady"].pass_fraction, rows["never"].pass_fraction) == (1.0, 0.0)


def test_results_are_kept_only_once_every_item_ended(tmp_path: Path) -> None:
    """RESULTS.json is written when the last item has its outcome, not before, and is read after."""
    store = make_eval(tmp_path, "e1", ["a", "b"], 1)
    end_item(store, "a", 1, "pass")
    assert read_results(store).status == "running"
    assert not store.results_file.exists()
    end_item(store, "b", 1, "fail")
    assert read_results(store).status == "finished"
    assert store.results_file.exists()
    store.item("a", 1, 1).outcome_file.unlink()  # nothing changes an ended evaluation: the kept file answers
    assert read_results(store).passed == 1


def test_void_tries_set_aside_are_counted(tmp_path: Path) -> None:
    """Void tries set aside as `<k>.void-<n>` are counted; they are not items."""
    store = make_eval(tmp_path, "e1", ["a"], 1)
    item = store.item("a", 1, 1)
    for _ in range(2):
        item.root.mkdir(parents=True)
        item.set_aside()
    end_item(store, "a", 1, "pass", voids=2)
    assert [p.name for p in item.voids()] == ["1.void-1", "1.void-2"]
    results = read_results(store)
    assert (results.voids, results.passed, results.items) == (2, 1, 1)


def test_compare_counts_flips_per_case_with_the_exact_test(tmp_path: Path) -> None:
    """Eight cases: six gained, one lost, one passing on both: McNemar p = 2 * P(X <= 1 | 7) = 0.125,
    and the difference is (7 - 2) / 8 with its interval around it."""
    cases = [f"c{i}" for i in range(8)]
    before, after = make_eval(tmp_path, "before", cases, 1), make_eval(tmp_path, "after", cases, 1)
    for i, case in enumerate(cases):
        end_item(before, case, 1, "pass" if i in (0, 1) else "fail")
        end_item(after, case, 1, "fail" if i == 1 else "pass")
    result = compare(read_results(before), read_results(after))
    assert (result.pairs, result.both, result.gained, result.lost, result.neither) == (8, 1, 6, 1, 0)
    assert result.mcnemar_p == pytest.approx(0.125)
    assert result.difference.difference == pytest.approx(5 / 8)
    assert result.difference.low < 5 / 8 < result.difference.high
    assert [(f.case, f.direction) for f in result.flips if f.direction == "lost"] == [("c1", "lost")]
    assert result.before.cost_usd == pytest.approx(0.008)


def test_compare_pairs_cases_by_their_majority_of_repeats(tmp_path: Path) -> None:
    """With repeats a case is one pair: 2 of 3 passed is a pass, 1 of 2 (a tie) is not; a case graded on
    one side only is unpaired; the sentence says its figure is of cases passing most of their repeats."""
    before, after = (
        make_eval(tmp_path, "b", ["a", "tie", "gone"], 3),
        make_eval(tmp_path, "a", ["a", "tie"], 3),
    )
    for k, outcome in zip((1, 2, 3), ("fail", "fail", "pass"), strict=True):
        end_item(before, "a", k, outcome)
    for k, outcome in zip((1, 2, 3), ("pass", "pass", "fail"), strict=True):
        end_item(after, "a", k, outcome)
    end_item(before, "tie", 1, "pass")
    end_item(after, "tie", 1, "pass")
    end_item(after, "tie", 2, "fail")
    end_item(before, "gone", 1, "pass")
    result = compare(read_results(before), read_results(after))
    assert [(f.case, f.direction) for f in result.flips] == [("a", "gained"), ("tie", "lost")]
    assert result.unpaired == ["gone"]
    assert result.pairs == 2
    assert "+0.0 points in cases passing most of their repeats, 95 % CI" in chance_line(result)


def test_compare_says_in_words_whether_the_difference_is_beyond_chance(tmp_path: Path) -> None:
    """Six gained and one lost of eight (p = 0.125) is within chance, said so in words (and, as its
    interval leaves 0 out, why no claim is made); twelve gained of
    twelve (p = 0.0005, interval above 0) is better beyond chance; twelve lost is worse."""
    eight = [f"c{i}" for i in range(8)]
    before, after = make_eval(tmp_path, "b8", eight, 1), make_eval(tmp_path, "a8", eight, 1)
    for i, case in enumerate(eight):
        end_item(before, case, 1, "pass" if i in (0, 1) else "fail")
        end_item(after, case, 1, "fail" if i == 1 else "pass")
    within = compare(read_results(before), read_results(after))
    assert within.chance == "within-chance"
    assert chance_line(within).startswith("The difference is within chance (+62.5 points")
    assert within.difference.low > 0  # Newcombe's interval leaves 0 out; the sentence says why no claim
    assert "leaves 0 out, but the exact test over 7 flipped cases does not" in chance_line(within)
    twelve = [f"d{i}" for i in range(12)]
    low, high = make_eval(tmp_path, "low", twelve, 1), make_eval(tmp_path, "high", twelve, 1)
    for case in twelve:
        end_item(low, case, 1, "fail")
        end_item(high, case, 1, "pass")
    better = compare(read_results(low), read_results(high))
    assert better.chance == "better" and chance_line(better).startswith("B is better than A beyond chance")
    worse = compare(read_results(high), read_results(low))
    assert worse.chance == "worse" and "worse than A beyond chance" in chance_line(worse)
