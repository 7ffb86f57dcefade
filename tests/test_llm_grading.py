"""An LLM analyzer's answer must grade every rubric item and agree with itself: the schema it is sent is
the case's own, and an answer that breaks it gets the repair round, then fails the step; it is never
recorded as a grade."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.core.io.files import read_model
from service.core.models.case import Case, RubricItem
from service.core.models.records import Feedback
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.fleet import Fleet, write_tuning
from tests.test_llm_adapters import KEY, KEY_ENV, analyze, feedback_of
from workers.adapters.llm.grading import check_feedback, feedback_schema

SKIPS = json.dumps({"verdict": "fail", "done": False, "rubric": {}, "summary": "No scores."})
CONTRADICTS = json.dumps({"verdict": "pass", "done": False, "rubric": {"greets": 1}, "summary": "Odd."})
GOOD = json.dumps({"verdict": "pass", "done": True, "rubric": {"greets": 1}, "summary": "It greets."})


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeOpenAI() as fake:
        yield fake


def test_the_schema_requires_every_rubric_id_and_ties_done_to_verdict() -> None:
    """The case's schema makes each rubric id a required score and allows no other; `done` is true
    exactly with verdict pass; the checks hold an answer to the same rules."""
    case = Case(id="c", input="x", rubric=[RubricItem(id="a", text="A"), RubricItem(id="b", text="B")])
    passing, other = feedback_schema(case)["anyOf"]
    for variant in (passing, other):
        rubric = variant["properties"]["rubric"]
        assert rubric["required"] == ["a", "b"] and rubric["additionalProperties"] is False
        assert set(variant["required"]) >= {"verdict", "done", "rubric", "improvements", "summary"}
    assert passing["properties"]["done"]["const"] is True
    assert other["properties"]["done"]["const"] is False
    assert "void" in other["properties"]["verdict"]["enum"]

    def problem(verdict: str, done: str, rubric: str) -> str:
        return check_feedback(f'{{"verdict": "{verdict}", "done": {done}, "rubric": {rubric}}}', case)[1]

    assert problem("fail", "false", '{"a": 0, "b": 1}') == ""
    assert "no score for b" in problem("fail", "false", '{"a": 0}')
    assert "contradict" in problem("fail", "true", '{"a": 0, "b": 0}')
    assert "not a score from 0 to 1" in problem("fail", "false", '{"a": 3, "b": 0}')


@pytest.mark.parametrize("bad", [SKIPS, CONTRADICTS], ids=["skips-rubric", "pass-not-done"])
async def test_a_bad_grade_is_repaired(server: FakeOpenAI, tmp_path: Path, bad: str) -> None:
    """A grade that scores no rubric item, or says pass with done false, is sent back naming the problem;
    the repaired answer is the grade."""
    feedback = feedback_of(await analyze(server, tmp_path, Reply(bad), Reply(GOOD)))
    assert feedback.verdict == "pass" and feedback.done and feedback.rubric == {"greets": 1}
    repair = server.requests[1].body["messages"][-1]["content"]
    assert ("no score for greets" if bad == SKIPS else "contradict") in repair


@pytest.mark.parametrize("bad", [SKIPS, CONTRADICTS], ids=["skips-rubric", "pass-not-done"])
async def test_a_bad_grade_twice_fails_the_step(server: FakeOpenAI, tmp_path: Path, bad: str) -> None:
    """The same breach after the repair fails the step with that reason and hands back no feedback."""
    outcome = await analyze(server, tmp_path, Reply(bad), Reply(bad))
    assert outcome.feedback is None and outcome.analysis is None
    reason = outcome.exit.error or ""
    assert "after one repair round" in reason
    assert ("no score for greets" if bad == SKIPS else "contradict") in reason


async def test_a_grade_that_skips_the_rubric_is_never_recorded(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a fleet, an analyzer that never scores the rubric ends the case failed with the reason, and no
    feedback.json (no grade) is written for the run."""
    monkeypatch.delenv(KEY_ENV, raising=False)

    def responder(body: dict[str, Any]) -> Reply:
        return Reply(SKIPS) if "response_format" in body else Reply("Hello, Ada!")

    with FakeOpenAI(responder=responder) as fake:
        llm = {"kind": "llm", "base_url": fake.base_url, "model": "m", "api_key_env": None, "max_retries": 0}
        case = {"id": "c1", "input": "Greet Ada.", "rubric": [{"id": "greets", "text": "Greets Ada."}]}
        tuning = write_tuning(tmp_path / "t", [case], runner=llm, analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        fleet.start_worker(2)
        rows = await fleet.wait_finished(1)
    assert rows["c1"].state == "failed" and "no score for greets" in (rows["c1"].reason or "")
    attempt = fleet.settings.store / "tunings" / "t1" / "cases" / "c1" / "r1" / "nomem" / "1"
    assert read_model(attempt / "feedback.json", Feedback) is None
    assert not any(e["kind"] == "step_finished" and e.get("step") == "analyze" for e in fleet.events())
