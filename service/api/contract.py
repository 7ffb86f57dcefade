"""The event contract as a JavaScript module for the dashboard (`GET /static/contract.js`): made from
`service.core.models.events` when the app is built, as the OpenAPI document is made from the
endpoints, so the dashboard names kinds only through it and can never drift from the enum."""

from __future__ import annotations

import json

from service.core.models.events import CASE_ENDS, GOAL_ENDS, EventKind

CONTRACT_PATH = "/static/contract.js"


def contract_module() -> str:
    """The module's text: `EVENT_KINDS` (member name to kind), `CASE_ENDS` (state to kind) and
    `GOAL_ENDS` (status to kind), each frozen."""
    exports = {
        "EVENT_KINDS": {kind.name: kind.value for kind in EventKind},
        "CASE_ENDS": {state: kind.value for state, kind in CASE_ENDS.items()},
        "GOAL_ENDS": {status: kind.value for status, kind in GOAL_ENDS.items()},
    }
    lines = ["// The event contract, made from service/core/models/events.py by service/api/contract.py."]
    lines += [f"export const {name} = Object.freeze({json.dumps(value)});" for name, value in exports.items()]
    return "\n".join(lines) + "\n"
