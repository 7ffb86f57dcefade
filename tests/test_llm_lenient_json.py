"""A model's JSON answer read as leniently as is safe: raw control characters inside its strings (a
newline written as it is, as small models do) are accepted, and the answer is then validated as strictly
as before; a reason that quotes the analyzer's failure reads as a sentence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAI, Reply, Scripted
from tests.support.fleet import Fleet, write_tuning
from tests.test_llm_adapters import (
    EDITS,
    FAIL,
    KEY,
    KEY_ENV,
    RULES,
    analyze,
    apply,
    cases,
    command_runner,
    config,
    feedback_of,
    server,
)
from workers.adapters.llm.session import json_answer

__all__ = ["server"]  # the fixture, shared with tests/test_llm_adapters.py


def raw(answer: str) -> str:
    """The answer with every escaped newline inside its strings written as a raw newline."""
    return answer.replace("\\n", "\n")


@pytest.mark.parametrize(
    "answer, expected",
    [
        ('{"a": "one\ntwo\tthree\r"}', {"a": "one\ntwo\tthree\r"}),
        ('{\n  "a": "x\x01y"\n}', {"a": "x\x01y"}),
        ('{"a": "quote \\" then\nnewline", "b": "\\\\"}', {"a": 'quote " then\nnewline', "b": "\\"}),
        ('```json\n{"a": "fenced\nline"}\n```', {"a": "fenced\nline"}),
    ],
    ids=["newline tab cr", "a control byte", "escapes kept", "in a fence"],
)
def test_raw_control_characters_inside_strings_are_read(answer: str, expected: dict[str, Any]) -> None:
    """Raw control characters inside JSON strings are escaped (strict JSON refuses them), escaped quotes
    and backslashes are left as they are, and the whitespace between values is untouched."""
    with pytest.raises(json.JSONDecodeError):
        json.loads(answer.strip("`json\n"))
    assert json.loads(json_answer(answer)) == expected


def test_an_answer_that_is_not_json_stays_refused() -> None:
    """Leniency reaches only inside strings: a truncated object is still not JSON."""
    with pytest.raises(json.JSONDecodeError):
        json.loads(json_answer('{"a": "unterminated\n'))


async def test_feedback_with_raw_newlines_in_its_strings_is_read_without_a_repair(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """The analyzer's answer with raw newlines inside its strings is valid feedback at the first call."""
    assert "\n" in raw(FAIL)
    feedback = feedback_of(await analyze(server, tmp_path, Reply(raw(FAIL), 700, 30)))
    assert len(server.requests) == 1
    assert feedback.improvements[0].change == "Add a greeting rule\nThe prose never asks to greet."


async def test_an_edit_plan_with_raw_newlines_in_its_strings_is_applied(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    """The applier's answer with raw newlines inside its strings is read and its edit made, first call."""
    outcome = await apply(server, tmp_path, Reply(raw(EDITS), 400, 60))
    assert outcome.exit.error is None and len(server.requests) == 1
    assert (tmp_path / "tree" / "rules.md").read_text() == RULES + "- rule: greet\n"


async def test_an_analyzer_that_never_answers_valid_feedback_is_named_in_a_sentence(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A case whose LLM analyzer answers feedback without a verdict twice ends failed with a reason that
    says the analyzer failed and why, not "the analyzer its answer was not valid"."""

    def responder(body: dict[str, Any]) -> Scripted:
        return Reply('{"done": true}', 100, 10)

    with FakeOpenAI(responder=responder) as fake:
        llm = config(fake).model_dump(mode="json")
        tuning = write_tuning(tmp_path / "t", cases(1), runner=command_runner(), analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        fleet.start_worker(2, **{KEY_ENV: KEY})
        rows = await fleet.wait_finished(1)
    reason = rows["c1"].reason or ""
    assert rows["c1"].state == "failed"
    assert "(the analyzer failed: its answer was not valid after one repair round: field 'verdict'" in reason
    assert "the analyzer its" not in reason
