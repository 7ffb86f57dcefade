"""Property tests of every model at a boundary (issue 54): case files, goal specs, tuning files and
evaluation requests. Whatever Hypothesis writes, the input is either accepted, and then goes through the
steps the fleet takes next without an error (a case kept in a store and read back under its folder and
job id, a goal's limits resolved into its deadlines, a tuning's roles built, an evaluation's spec made),
or refused with one line that names the file (or the field).

Examples: 2,000 per model under `CI=true`, 200 otherwise (HYPOTHESIS_EXAMPLES overrides both).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from service.client.tunings import load_tuning_file
from service.core.errors import CaseFileError, ConfigError
from service.core.io.files import model_bytes, read_model
from service.core.models.case import Case
from service.core.models.jobs import CaseJob
from service.core.settings import FleetSettings
from service.core.store import Store
from service.kinds.cases.files import load_case
from service.kinds.evals.api import EvalRequest
from service.kinds.evals.fleet import _new_id
from service.kinds.evals.models import EvalCaseRef, EvalSpec
from service.kinds.evals.names import reserved
from service.kinds.goals.spec import load_goal_file, resolve_limits
from service.kinds.goals.store import starting_state

CI = os.environ.get("CI", "").lower() == "true"
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "2000" if CI else "200"))
RUN = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

slugish = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True),
    st.text(max_size=12),
    st.sampled_from(["x\n", "../x", "a/b", "", "A", "a" * 129, ".hidden", "-x"]),
)
EDGES = [int("9" * 255), 1e308, 1, int("9" * 254), 2**31, 10**400, 1001, 30 * 86400.0 + 1, 0, -1, 2**31 - 1]
"""Values at and past the bounds the fleet keeps (a rev's, a timeout's, a repeat count's), drawn often
(the worst first: Hypothesis draws a sample's first elements most)."""
numbers = st.one_of(
    st.sampled_from(EDGES),
    st.sampled_from(EDGES),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20), slugish)
json_like = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value from `strategy`, or any JSON-like value (a wrong type, a wrong shape)."""
    return st.one_of(strategy, json_like)


def mostly(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value from `strategy` seven times in eight, else any JSON-like value: a document drawn
    so is often valid, or wrong in one field, and so reaches what the fleet does with an accepted one."""
    return st.sampled_from(range(8)).flatmap(lambda n: json_like if n == 7 else strategy)


def nearly_valid(
    required: dict[str, st.SearchStrategy[Any]], optional: dict[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {name: mostly(value) for name, value in required.items()},
        optional={name: mostly(value) for name, value in optional.items()},
    )


def document(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """A mapping holding some of `fields` (and now and then a stray key), or not a mapping at all."""
    mapping = st.fixed_dictionaries({}, optional={**fields, "stray": json_like})
    return st.one_of(mapping, mapping, mapping, json_like)


def as_text(data: Any, style: str) -> str:
    if style == "yaml":
        return yaml.safe_dump(data)
    if style == "raw":
        return str(data)
    import json

    return json.dumps(data, allow_nan=True)


@contextmanager
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tf-prop-") as made:
        yield Path(made)


def refused_in_one_line(error: Exception, path: Path) -> None:
    message = str(error)
    assert "\n" not in message, message
    assert str(path) in message, message


def written(root: Path, name: str, data: Any, style: str) -> Path:
    path = root / f"{name}.{'json' if style == 'json' else 'yaml'}"
    path.write_text(as_text(data, style), encoding="utf-8")
    return path


good_slug = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True)
good_text = st.text(min_size=1, max_size=20)
rubric_item = st.fixed_dictionaries({"id": maybe(slugish), "text": maybe(st.text(max_size=10))})
good_rubric = st.lists(st.fixed_dictionaries({"id": good_slug, "text": good_text}), min_size=1, max_size=2)
valid_case = nearly_valid(
    {"id": good_slug, "input": good_text, "rubric": good_rubric},
    {"rev": numbers, "demo": st.dictionaries(st.text(max_size=6), json_like, max_size=3)},
)
case_document = st.one_of(
    valid_case,
    document(
        {
            "id": maybe(slugish),
            "rev": maybe(numbers),
            "input": maybe(st.text(max_size=20)),
            "rubric": maybe(st.lists(rubric_item, max_size=3)),
            "demo": maybe(st.dictionaries(st.text(max_size=6), json_like, max_size=3)),
        }
    ),
)
styles = st.sampled_from(["yaml", "json", "raw"])


@RUN
@given(data=case_document, style=styles)
def test_a_case_file_is_kept_and_read_back_or_refused_in_one_line(data: Any, style: str) -> None:
    """A case file is a Case that a store keeps under its folder and job id and reads back equal, or a
    CaseFileError of one line naming the file."""
    with folder() as root:
        path = written(root, "case", data, style)
        try:
            case = load_case(path)
        except CaseFileError as exc:
            refused_in_one_line(exc, path)
            return
        kept = Store(root / "store").tuning("t1").case(case.id, case.rev)
        kept.root.mkdir(parents=True)
        kept.case_file.write_bytes(model_bytes(case))
        assert read_model(kept.case_file, Case) == case
        assert CaseJob(tuning="t1", case=case.id, rev=case.rev).job_id.endswith(f":{case.rev}")


counts = st.one_of(st.integers(min_value=1, max_value=20), st.sampled_from([10**9, 10**400, 0, -1]))
seconds = st.one_of(
    st.sampled_from([1e308, float("inf"), 30 * 86400.0 + 1, 0.0]), st.floats(min_value=0.5, max_value=1e5)
)
limits = st.fixed_dictionaries(
    {},
    optional={
        "min_iterations": mostly(counts),
        "max_iterations": mostly(counts),
        "timeout_s": mostly(seconds),
        "iteration_timeout_s": mostly(seconds),
        "reviewer_timeout_s": mostly(seconds),
        "attempts_per_task": mostly(counts),
        "max_voids": mostly(counts),
    },
)
demo_adapter = st.fixed_dictionaries({"kind": st.just("demo")}, optional={"seed": maybe(numbers)})
valid_goal = nearly_valid({"id": good_slug, "goal": good_text, "limits": limits}, {"runner": demo_adapter})
goal_document = st.one_of(
    valid_goal,
    document(
        {
            "id": maybe(slugish),
            "goal": maybe(st.text(max_size=20)),
            "acceptance": maybe(st.lists(st.text(max_size=10), max_size=3)),
            "limits": maybe(limits),
            "runner": maybe(demo_adapter),
            "demo": maybe(st.dictionaries(st.text(max_size=6), json_like, max_size=3)),
        }
    ),
)


@RUN
@given(data=goal_document, style=styles)
def test_a_goal_spec_gets_its_deadlines_or_is_refused_in_one_line(data: Any, style: str) -> None:
    """A goal spec's limits resolve into a starting state with its deadline (no date past the calendar),
    or the spec is refused with one line naming the file (or, for contradicting limits, the goal)."""
    with folder() as root:
        path = written(root, "goal", data, style)
        try:
            spec = load_goal_file(path)
        except ConfigError as exc:
            refused_in_one_line(exc, path)
            return
        try:
            limits = resolve_limits(spec, FleetSettings())
        except ConfigError as exc:
            assert "\n" not in str(exc) and "limits.min_iterations" in str(exc)
            return
        state = starting_state(spec, limits, None, None)
        assert state.deadline_at > datetime.now(UTC)


command_adapter = st.fixed_dictionaries(
    {"kind": st.just("command"), "argv": maybe(st.lists(st.text(max_size=8), min_size=1, max_size=3))},
    optional={"timeout_s": maybe(numbers)},
)
tuning_document = document(
    {
        "name": maybe(slugish),
        "system": st.just("system"),
        "cases": st.just("cases"),
        "tries": maybe(numbers),
        "mem_tries": maybe(numbers),
        "runner": maybe(st.one_of(demo_adapter, command_adapter)),
        "analyzer": maybe(demo_adapter),
        "applier": maybe(demo_adapter),
        "holdout": maybe(
            st.fixed_dictionaries({}, optional={"fraction": maybe(numbers), "seed": maybe(numbers)})
        ),
    }
)


@RUN
@given(data=tuning_document)
def test_a_tuning_file_loads_or_is_refused_in_one_line(data: Any) -> None:
    """A tuning file is a TuningConfig with its folders made absolute, or a ConfigError of one line
    naming the file."""
    with folder() as root:
        (root / "system").mkdir()
        path = written(root, "tuning", data, "yaml")
        try:
            config = load_tuning_file(path)
        except ConfigError as exc:
            refused_in_one_line(exc, path)
            return
        assert config.system.is_absolute() and config.cases.is_absolute()


eval_request = document(
    {
        "version": maybe(st.sampled_from(["main", "initial", "abcd", "0" * 40, "main\n", "g123"])),
        "split": maybe(st.sampled_from(["holdout", "train", "all", "nope"])),
        "repeats": maybe(numbers),
        "name": maybe(slugish),
    }
)


def _spec_of(asked: EvalRequest) -> Callable[[], EvalSpec]:
    return lambda: EvalSpec(
        id=asked.name or _new_id("t1"),
        tuning="t1",
        name=asked.name,
        version_asked=asked.version,
        version="0" * 40,
        source=asked.split or "all",
        cases=[EvalCaseRef(id="a", rev=1)],
        repeats=asked.repeats,
        created_at=datetime.now(UTC),
    )


@RUN
@given(data=eval_request)
def test_an_evaluation_request_makes_its_spec_or_is_refused_by_field(data: Any) -> None:
    """An evaluation request the model accepts makes an EvalSpec (no bound is found only later, as a
    500), unless its name is not a slug or is one the fleet keeps, which `create` refuses in one line;
    a request the model refuses names its fields."""
    try:
        asked = EvalRequest.model_validate(data)
    except ValidationError as exc:
        assert all(error["loc"] is not None for error in exc.errors())
        return
    name_ok = asked.name is None or (asked.name == asked.name.strip() and not reserved(asked.name))
    try:
        _spec_of(asked)()
    except ValidationError as exc:
        assert not name_ok or any(error["loc"] == ("id",) for error in exc.errors()), exc
        assert {error["loc"][0] for error in exc.errors()} == {"id"}, exc


@pytest.mark.parametrize("model", ["case", "goal", "tuning", "eval"])
def test_each_model_runs_its_examples(model: str) -> None:
    """The property tests above run EXAMPLES examples per model (2,000 under CI=true)."""
    assert (2000 if CI and "HYPOTHESIS_EXAMPLES" not in os.environ else 1) <= EXAMPLES
