"""The event contract as a JavaScript module for the dashboard (`GET /static/contract.js`): made from
`service.core.models.events` when the app is built, as the OpenAPI document is made from the
endpoints, so the dashboard names kinds, and the fields of their data, only through it and can never
drift from the models."""

from __future__ import annotations

import json
from typing import Any

from service.core.models.events import CASE_ENDS, EventKind, contract_fields
from service.kinds.goals.models import GOAL_ENDS

CONTRACT_PATH = "/static/contract.js"


def event_fields() -> dict[str, dict[str, Any]]:
    """Each kind's data as the dashboard reads it, from its payload model's JSON schema: its fields
    (name to the field's schema) and those it always carries."""
    return {
        kind: {"fields": schema.get("properties", {}), "required": schema.get("required", [])}
        for kind, schema in contract_fields().items()
    }


def contract_module() -> str:
    """The module's text: `EVENT_KINDS` (member name to kind), `EVENT_FIELDS` (kind to the fields of
    its data: `event_fields`), `CASE_ENDS` (state to kind) and `GOAL_ENDS` (status to kind), each
    frozen."""
    exports = {
        "EVENT_KINDS": {kind.name: kind.value for kind in EventKind},
        "EVENT_FIELDS": event_fields(),
        "CASE_ENDS": {state: kind.value for state, kind in CASE_ENDS.items()},
        "GOAL_ENDS": {status: kind.value for status, kind in GOAL_ENDS.items()},
    }
    lines = ["// The event contract, made from service/core/models/events.py by service/api/contract.py."]
    lines += [f"export const {name} = Object.freeze({json.dumps(value)});" for name, value in exports.items()]
    return "\n".join(lines) + "\n"
