"""The store's record of evaluations gc retired from Redis (service.kinds.evals.retired): the ids the
daemon's reconciliation reads every round come from the lines appended since its last read."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from service.kinds.evals.models import EvalHead, EvalProgress
from service.kinds.evals.retired import RetiredEvals
from service.kinds.evals.stats import Rate


def _progress(eval_id: str) -> EvalProgress:
    head = EvalHead(
        id=eval_id,
        tuning="t1",
        purpose="gate",
        version="a" * 40,
        version_asked="main",
        items=2,
        created_at=datetime.now(UTC),
    )
    return EvalProgress(
        head=head, passed=2, rate=Rate(passed=2, graded=2, rate=1, low=0.3, high=1), status="finished"
    )


def _lines(*eval_ids: str) -> bytes:
    return b"".join(_progress(e).model_dump_json().encode() + b"\n" for e in eval_ids)


def test_ids_read_what_was_appended_since_the_last_read_and_agree_with_read(tmp_path: Path) -> None:
    """`ids()` gives the same ids as a whole `read()` after each append; a line still being written
    is left for the next call, and a line that does not parse is left out, as `read()` leaves it."""
    retired = RetiredEvals(tmp_path)
    assert retired.ids() == frozenset()
    retired.add([_progress("e1"), _progress("e2")])
    assert retired.ids() == {"e1", "e2"} == set(retired.read())
    partial = _lines("e3")
    with retired.path.open("ab") as file:
        file.write(b"not json\n" + partial[:20])
    assert retired.ids() == {"e1", "e2"}
    with retired.path.open("ab") as file:
        file.write(partial[20:])
    assert retired.ids() == {"e1", "e2", "e3"} == set(retired.read())


def test_ids_read_a_replaced_file_again_from_its_start(tmp_path: Path) -> None:
    """A record replaced by another (by hand), shorter or longer, is read afresh rather than from the old
    offset; a removed one gives no ids."""
    retired = RetiredEvals(tmp_path)
    retired.add([_progress("e1"), _progress("e2"), _progress("e3")])
    assert retired.ids() == {"e1", "e2", "e3"}
    replacement = tmp_path / "replacement"
    replacement.write_bytes(_lines("e9"))
    replacement.replace(retired.path)
    assert retired.ids() == {"e9"}
    replacement.write_bytes(_lines("e5", "e6", "e7", "e8"))
    replacement.replace(retired.path)
    assert retired.ids() == {"e5", "e6", "e7", "e8"}
    retired.path.unlink()
    assert retired.ids() == frozenset()
