"""Typed events end to end: every kind has a payload model, and an event of each kind goes through the
one sink and comes back (events.jsonl, the stream, GET /api/events) as its kind's class with its typed
payload, in the same line a dict payload made; the sink refuses a planted bad payload, naming the kind
and the field, before anything is written; the dashboard's contract lists each kind's fields, and the
dashboard reads a field of an event's data only through it."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api.app import create_app
from service.api.contract import CONTRACT_PATH
from service.client.client import TunefleetClient
from service.core import keys
from service.core.errors import EventDataError
from service.core.events import EventSink
from service.core.models.event_types import GatePassedEvent
from service.core.models.events import EVENT_CLASSES, PAYLOADS, EventKind, parse_event
from service.core.settings import FleetSettings
from service.kinds.registry import counter_rules
from tests.support.event_samples import SAMPLES

DASHBOARD = Path(__file__).resolve().parent.parent / "service" / "dashboard"
DIRECT_READ = re.compile(r"\.data\s*(?:\.\s*\w+|\[(?!name\]))")
"""A field of an event's data read around the contract (`event.data.eval`, `event.data["eval"]`); the
one read `dataField` makes (`event.data[name]`) is the contract's."""
FIELD_READ = re.compile(r"dataField\(\"(\w+)\"\)")


@pytest.fixture
async def client(settings: FleetSettings) -> AsyncIterator[TunefleetClient]:
    async with TunefleetClient(settings) as opened:
        yield opened


def sink_of(client: TunefleetClient, settings: FleetSettings) -> EventSink:
    return EventSink(client.redis, client.store, settings.events_max, counter_rules(settings))


def test_every_kind_has_one_class_and_a_closed_payload_model() -> None:
    """Each kind of the enum has exactly one event class and a payload model that refuses unknown keys
    (the samples the other tests send cover every kind too)."""
    assert [cls.model_fields["kind"].annotation.__args__[0] for cls in EVENT_CLASSES] == list(EventKind)  # type: ignore[union-attr]
    assert set(PAYLOADS) == set(EventKind) == set(SAMPLES)
    assert all(model.model_config.get("extra") == "forbid" for model in PAYLOADS.values())


async def test_every_kind_round_trips_typed_in_the_same_line(
    client: TunefleetClient, settings: FleetSettings
) -> None:
    """An event of each kind, sent through the sink with its sample's fields, is written as exactly those
    fields (the line a dict payload made), and read back from events.jsonl, the stream and GET /api/events
    as its kind's class whose data is its kind's payload model holding the sample's data."""
    sink = sink_of(client, settings)
    for kind, fields in SAMPLES.items():
        await sink.emit(kind, "t1", **fields)
    lines = client.store.tuning("t1").events_file.read_text().splitlines()
    entries = await client.redis.xrange(keys.events())
    assert len(lines) == len(entries) == len(SAMPLES)
    for (kind, fields), line, (_, entry) in zip(SAMPLES.items(), lines, entries, strict=True):
        assert entry[b"event"].decode() == line
        written = json.loads(line)
        assert written == {"at": written["at"], "kind": kind.value, "tuning": "t1", **fields}
        event = parse_event(line)
        assert type(event).__name__ == "".join(w.title() for w in kind.value.split("_")) + "Event"
        assert type(event.data) is PAYLOADS[kind]
        assert event.data.wire() == fields.get("data", {})
        assert event.line() == line
    app = create_app(client, settings.model_copy(update={"api_public_read": True}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as web:
        answer = await web.get("/api/events", params={"limit": len(SAMPLES)})
    assert answer.status_code == 200, answer.text
    served = [entry["event"] for entry in answer.json()["events"]]
    assert [(e["kind"], e["data"]) for e in served] == [
        (k.value, f.get("data", {})) for k, f in SAMPLES.items()
    ]


def test_a_payload_read_back_is_typed() -> None:
    """A gate's verdict read from its line is a GatePassedEvent whose data's fields have their types (a
    list, an int, a float, a bool), not a dict of whatever the line held."""
    line = json.dumps({"at": "2026-12-07T12:00:00Z", "kind": "gate_passed", "tuning": "t1",
                       **SAMPLES[EventKind.GATE_PASSED]})  # fmt: skip
    event = parse_event(line)
    assert isinstance(event, GatePassedEvent)
    assert (event.data.broken, event.data.items, event.data.gate_cost_usd, event.data.judged) == (
        ["c2"],
        4,
        0.25,
        True,
    )


BAD: list[tuple[EventKind, dict[str, Any], str]] = [
    (EventKind.BREAKER_PROBED, {"data": {"closed": "maybe"}}, "breaker_probed: field 'data.closed'"),
    (EventKind.GATE_STARTED, {"data": {"gate_eval": "g", "items": 4}},
     "gate_started: field 'data.candidate': Field required"),
    (EventKind.CASE_QUEUED, {"case": "c1", "data": {"eval": "e-1"}}, "case_queued: field 'data.eval': Extra"),
    (EventKind.CASE_STARTED, {"case": "c1"}, "case_started: field 'data': Field required"),
    (EventKind.STEP_FINISHED, {"step": "run", "duration_ms": 5, "data": {"timed_out": []}},
     "step_finished: field 'data.timed_out'"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "fields", "error"), BAD, ids=[f"{k.value}" for k, _, _ in BAD])
async def test_the_sink_refuses_a_planted_bad_payload_before_any_write(
    client: TunefleetClient, settings: FleetSettings, kind: EventKind, fields: dict[str, Any], error: str
) -> None:
    """A payload with a wrong type, a missing key or a key its kind does not carry is refused by emit,
    queue and emit_many with one error naming the kind and the field, and nothing reaches the events file,
    the stream or the counters."""
    sink = sink_of(client, settings)
    error = re.escape(f"event {error}")
    with pytest.raises(EventDataError, match=error):
        await sink.emit(kind, "t1", **fields)
    with pytest.raises(EventDataError, match=error):
        sink.queue(kind, "t1", **fields)
    with pytest.raises(EventDataError, match=error):
        await sink.emit_many(kind, "t1", [SAMPLES[kind], fields])
    assert await client.redis.xlen(keys.events()) == 0
    assert await client.redis.exists(keys.stats("t1")) == 0
    assert not client.store.tuning("t1").events_file.exists()


async def test_the_contract_lists_every_kinds_fields(
    client: TunefleetClient, settings: FleetSettings
) -> None:
    """The served contract.js exports, for every kind, the fields of its data by their wire names, with
    their JSON schema and which are required, as its payload model says."""
    app = create_app(client, settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as web:
        text = (await web.get(CONTRACT_PATH)).text
    found = re.search(r"^export const EVENT_FIELDS = Object\.freeze\((.*)\);$", text, re.M)
    assert found is not None
    fields = json.loads(found.group(1))
    assert list(fields) == [kind.value for kind in EventKind]
    for kind, model in PAYLOADS.items():
        names = {info.alias or name for name, info in model.model_fields.items()}
        required = {info.alias or name for name, info in model.model_fields.items() if info.is_required()}
        assert set(fields[kind.value]["fields"]) == names and set(fields[kind.value]["required"]) == required
    assert fields["case_started"]["fields"]["try"]["type"] == "integer"
    assert fields["gate_passed"]["fields"]["judged"]["type"] == "boolean"
    assert fields["case_queued"] == {"fields": {}, "required": []}


def data_reads(text: str, known: set[str]) -> list[str]:
    """The places in a dashboard script that read a field of an event's data around the contract: a
    direct read, or a `dataField` of a name that no kind's data carries."""
    wrong = [f"direct: {m.group(0)}" for m in DIRECT_READ.finditer(text)]
    return wrong + [f"unknown: {name}" for name in FIELD_READ.findall(text) if name not in known]


def test_the_dashboard_reads_data_fields_only_through_the_contract() -> None:
    """No dashboard script reads `event.data.<field>` directly; each `dataField` names a field some kind
    carries; and the checker catches a planted direct read and a planted unknown name."""
    known = {info.alias or name for model in PAYLOADS.values() for name, info in model.model_fields.items()}
    scripts = {path.name: path.read_text() for path in DASHBOARD.glob("*.js")}
    assert {name: data_reads(text, known) for name, text in scripts.items() if data_reads(text, known)} == {}
    assert 'dataField("eval")' in scripts["app.js"]
    planted = 'const item = event.data.eval;\nconst r = dataField("repeet");'
    assert data_reads(planted, known) == ["direct: .data.eval", "unknown: repeet"]
