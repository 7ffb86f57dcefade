"""What an LLM analyzer must answer for one case, and whether its answer does.

The Feedback schema sent to the model is made per case (`feedback_schema`): `rubric` has every rubric
id of the case as a required property (a score from 0 to 1, nothing else), and `done` is tied to
`verdict`: the answer is either `{"verdict": "pass", "done": true, ...}` or `{"verdict": "fail" |
"void", "done": false, ...}`. A server that constrains its output to the schema (a grammar) cannot
answer otherwise; for the others `check_feedback` holds the answer to the same rules, and the
analyzer sends a breach back once (the repair round) before its step fails with it. An answer that
skips a rubric item or contradicts itself is never recorded as a grade.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError

from service.core.models.case import Case
from service.core.models.records import Feedback
from service.core.validation import describe_validation
from workers.adapters.llm.session import json_answer

SCORES = (0, 0.25, 0.5, 0.75, 1)
"""The scores the schema offers (the check takes any number from 0 to 1)."""
FLEET_FIELDS = ("run_seal", "seal", "usage")
"""Feedback fields the model is not asked for: the seals are the fleet's, the usage is measured."""


def base_schema() -> dict[str, Any]:
    """The Feedback schema less the fleet's fields (dear to make: an analyzer makes it once)."""
    schema = Feedback.model_json_schema()
    for name in FLEET_FIELDS:
        schema["properties"].pop(name, None)
    schema["required"] = [name for name in schema.get("required", []) if name not in FLEET_FIELDS]
    schema.get("$defs", {}).pop("Usage", None)
    return schema


def feedback_schema(case: Case, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Feedback JSON Schema for `case` (from `base_schema()`, which is not changed): every field
    the model writes required, every rubric id a required score, and `done` true exactly with verdict
    `pass`."""
    base = copy.deepcopy(base) if base is not None else base_schema()
    defs = base.pop("$defs", {})
    properties = base["properties"]
    ids = case.rubric_ids
    # Quarters: a grammar (llama.cpp's) bounds no number, but it keeps to an enum.
    score = {"type": "number", "enum": list(SCORES)}
    properties["rubric"] = {
        "type": "object",
        "description": "A score from 0 to 1 (in quarters) for every rubric item id of the case.",
        "properties": {item: dict(score) for item in ids},
        "required": list(ids),
        "additionalProperties": False,
    }
    # No maxLength nor maxItems: llama.cpp turns them into grammar repetitions, and past its limits its
    # grammar fails to parse (llama-cpp-python 0.3.36 then crashes at the first token).
    order = ["verdict", "done", "rubric", "improvements", "summary"]
    rest = {name: value for name, value in properties.items() if name not in order}
    variants = []
    for verdict, done in (({"const": "pass"}, True), ({"enum": ["fail", "void"]}, False)):
        props = copy.deepcopy({name: properties[name] for name in order}) | copy.deepcopy(rest)
        props["verdict"] = {"type": "string", **verdict}
        props["done"] = {"type": "boolean", "const": done}
        variants.append(
            {"type": "object", "properties": props, "required": order, "additionalProperties": False}
        )
    return {"title": "Feedback", "anyOf": variants, "$defs": defs}


def check_feedback(answer: str, case: Case) -> tuple[Feedback | None, str]:
    """The answer as Feedback, or None and what is wrong with it: not the schema, a rubric id without
    a score, a score outside 0..1, or `done` that contradicts `verdict`. Scores of ids the case lacks
    are the analyze step's business (it drops them with a note)."""
    try:
        feedback = Feedback.model_validate_json(json_answer(answer))
    except ValidationError as exc:
        return None, describe_validation(exc)
    missing = [item for item in case.rubric_ids if item not in feedback.rubric]
    if missing:
        return None, (
            f"field 'rubric': no score for {', '.join(missing)} (expected a score from 0 to 1 for "
            f"every rubric id: {', '.join(case.rubric_ids)})"
        )
    outside = {item: score for item, score in feedback.rubric.items() if not 0 <= score <= 1}
    if outside:
        item, score = next(iter(outside.items()))
        return None, f"field 'rubric.{item}': {score:g} is not a score from 0 to 1"
    if feedback.done != (feedback.verdict == "pass"):
        return None, (
            f"fields 'verdict' and 'done' contradict each other ({feedback.verdict} with done "
            f"{str(feedback.done).lower()}): done is true exactly when the verdict is pass"
        )
    return feedback, ""
