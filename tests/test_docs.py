"""The reference documents kept true to the code: every setting, tuning field, placeholder and demo knob.

docs/configuration.md documents each field in a table row whose first cell names it in backticks and
whose second cell gives its default (`required` when there is none); the rows of one model sit under
a heading that names the model, e.g. "### Top level (`TuningConfig`)".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from service.cli.schema import SCHEMAS
from service.core.models.acceptance import GateConfig
from service.core.models.events import EventKind
from service.core.models.guards import GuardsConfig
from service.core.models.holdout import HoldoutConfig
from service.core.models.tuning import (
    PLACEHOLDERS,
    AgentLimits,
    Budget,
    CommandAdapter,
    DemoAdapter,
    LlmAdapter,
    ModelPrice,
    SandboxConfig,
    StepLatency,
    TuningConfig,
)
from service.core.settings import CONFIG_ENV, FleetSettings
from tests.support.fleet import Fleet, case, settings_env, write_tuning
from workers.adapters.demo_knobs import DemoKnobs

DOCS = Path(__file__).resolve().parent.parent / "docs"
CONFIGURATION = DOCS / "configuration.md"
ADAPTERS = DOCS / "adapters.md"
ENV_PREFIX = "TUNEFLEET_"
TUNING_MODELS: list[type[BaseModel]] = [
    TuningConfig,
    DemoAdapter,
    StepLatency,
    CommandAdapter,
    SandboxConfig,
    AgentLimits,
    LlmAdapter,
    ModelPrice,
    Budget,
    HoldoutConfig,
    GateConfig,
    GuardsConfig,
]


def render_default(field: FieldInfo) -> str | None:
    """How the docs write a field's default; None when it is a nested model (documented in its own table)."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return None
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def headings(lines: list[str]) -> dict[int, int]:
    """Line index -> level of every Markdown heading (lines inside fenced code blocks are not headings)."""
    found: dict[int, int] = {}
    fenced = False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found[index] = len(line) - len(line.lstrip("#"))
    return found


def section(text: str, marker: str) -> str:
    """The part of a Markdown text under the heading that contains `marker`, subsections included."""
    lines = text.splitlines()
    marks = headings(lines)
    start = next((i for i in marks if marker in lines[i]), None)
    assert start is not None, f"no heading containing {marker!r}"
    end = next((i for i in marks if i > start and marks[i] <= marks[start]), len(lines))
    return "\n".join(lines[start + 1 : end])


def table_rows(text: str) -> dict[str, list[str]]:
    """Table rows keyed by the first backticked name of their first cell; the other cells, unquoted."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        name = re.search(r"`([^`]+)`", cells[0])
        if name is not None:
            rows[name.group(1)] = [cell.replace("`", "").strip() for cell in cells[1:]]
    return rows


def settings_rows() -> dict[str, list[str]]:
    return table_rows(section(CONFIGURATION.read_text(), "Fleet settings"))


@pytest.mark.parametrize("field", list(FleetSettings.model_fields))
def test_every_setting_is_documented(field: str) -> None:
    """Each fleet setting has a row named by its environment variable, with its YAML key and true default."""
    rows = settings_rows()
    env = ENV_PREFIX + field.upper()
    assert env in rows, f"docs/configuration.md does not document {env}"
    section_lines = section(CONFIGURATION.read_text(), "Fleet settings").splitlines()
    line = next(line for line in section_lines if line.startswith(f"| `{env}`"))
    assert f"`{field}`" in line, f"the row of {env} does not name its YAML key `{field}`"
    assert rows[env][0] == render_default(FleetSettings.model_fields[field]), f"{env}: documented default"


def test_no_unknown_setting_is_documented() -> None:
    """Every TUNEFLEET_ variable the docs mention is a real setting (or the settings-file variable)."""
    known = {ENV_PREFIX + name.upper() for name in FleetSettings.model_fields} | {CONFIG_ENV}
    mentioned = set(re.findall(rf"\b{ENV_PREFIX}[A-Z0-9_]+\b", CONFIGURATION.read_text()))
    assert mentioned - known == set()


@pytest.mark.parametrize("model", TUNING_MODELS, ids=lambda m: m.__name__)
def test_every_tuning_field_is_documented(model: type[BaseModel]) -> None:
    """Each field of the tuning file's models has a row, with its true default, under the model's heading."""
    rows = table_rows(section(CONFIGURATION.read_text(), f"`{model.__name__}`"))
    fields = model.model_fields
    assert set(rows) == set(fields), f"{model.__name__}: rows differ from the model's fields"
    for name, field in fields.items():
        expected = render_default(field)
        if expected is not None:
            assert rows[name][0] == expected, f"{model.__name__}.{name}: documented default"


@pytest.mark.parametrize("role", list(PLACEHOLDERS))
def test_every_placeholder_is_documented(role: str) -> None:
    """Each role's placeholders, and no others, are listed in its table of docs/adapters.md."""
    rows = table_rows(section(ADAPTERS.read_text(), f"placeholders of the {role}"))
    assert set(rows) == {f"{{{name}}}" for name in PLACEHOLDERS[role]}


def test_every_demo_knob_is_documented() -> None:
    """Each per-case demo knob has a row in docs/adapters.md with its true default."""
    rows = table_rows(section(ADAPTERS.read_text(), "`DemoKnobs`"))
    assert set(rows) == set(DemoKnobs.model_fields)
    for name, field in DemoKnobs.model_fields.items():
        assert rows[name][0] == render_default(field), f"DemoKnobs.{name}: documented default"


def test_schema_names_in_adapters_doc_exist() -> None:
    """Every `tunefleet schema NAME` the adapter contract cites is a schema the CLI can print."""
    cited = re.findall(r"tunefleet schema ([a-z][a-z -]*[a-z])", ADAPTERS.read_text())
    names = {name for group in cited for name in group.split()}
    assert names, "docs/adapters.md cites no schema"
    assert names <= set(SCHEMAS)


def test_the_readmes_real_agent_tuning_is_valid() -> None:
    """The README's tuning for a real agent (a command runner, the LLM meta agent, a budget) loads."""
    text = (DOCS.parent / "README.md").read_text()
    readme = text[text.index("## Tuning a real agent") :]
    start = readme.index("```yaml\n") + len("```yaml\n")
    tuning = TuningConfig.model_validate(yaml.safe_load(readme[start : readme.index("```\n", start)]))
    assert tuning.analyzer.kind == "llm" and tuning.applier == tuning.analyzer
    assert tuning.budget.tuning_max_usd == 200.0


def readme_block(after: str, language: str) -> str:
    """The first fenced block of `language` in the README after the text `after`."""
    text = (DOCS.parent / "README.md").read_text()
    rest = text[text.index(after) :]
    start = rest.index(f"```{language}\n") + len(f"```{language}\n")
    return rest[start : rest.index("```\n", start)]


async def test_the_readmes_client_example_runs(fleet: Fleet, tmp_path: Path) -> None:
    """The README's Python client example runs as written (as a script, against a real fleet): it submits
    the case it finds, prints the queue and the results, and prints no log line of the library."""
    await fleet.start_tuning(write_tuning(tmp_path / "demo", [case("c0")], name="demo"))
    (tmp_path / "new-cases").mkdir()
    (tmp_path / "new-cases" / "late.yaml").write_text(yaml.safe_dump(case("late")))
    script = tmp_path / "example.py"
    script.write_text(readme_block("The Python client offers", "python"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFLEET_")}
    env |= settings_env(fleet.settings) | {"PYTHONPATH": str(DOCS.parent)}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "enqueued 1, refused 0",
        "queue depth 2",
        "c0 unfinished ",
        "late unfinished ",
    ]


def test_the_readmes_quick_start_runs_as_written(fleet: Fleet, tmp_path: Path) -> None:
    """Every command of the README's quick start runs as written, in order, on a real fleet (its `export` of
    the fleet's address replaced by the test's Redis and store): both example cases complete, the tuned
    version passes what the imported one failed, and the exported instructions are main's."""
    lines = [line.split("  #")[0].strip() for line in readme_block("## Quick start", "sh").splitlines()]
    commands = [line for line in lines if line and not line.startswith("export ")]
    assert commands[0].startswith("tunefleet init") and commands[-1].startswith("tunefleet export")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEFLEET_")}
    env |= settings_env(fleet.settings) | {"PYTHONPATH": str(DOCS.parent), "TUNEFLEET_API_PORT": "0"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    said = {}
    for command in commands:
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        words = command.split()
        said[" ".join(words[1:3] if words[1] == "eval" else words[1:2])] = done.stdout
    assert "greeting" in said["results"] and said["results"].count("completed") == 2
    assert "ok:" in said["check"]
    store_repo = fleet.settings.store / "tunings" / "my-agent" / "system.git"
    main = subprocess.run(
        ["git", f"--git-dir={store_repo}", "show", "main:instructions.md"], capture_output=True, text=True
    ).stdout
    assert (tmp_path / "tuned" / "instructions.md").read_text() == main and '"30 days"' in main
    assert "gained (fail -> pass): 2; lost (pass -> fail): 0" in said["eval compare"], said["eval compare"]


ARCHITECTURE = DOCS / "architecture.md"


def test_every_event_kind_is_in_the_events_table() -> None:
    """Each kind of the event contract (EventKind) has a row in docs/architecture.md's events table."""
    table = section(ARCHITECTURE.read_text(), "Events")
    documented = {
        name
        for line in table.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`([a-z][a-z0-9_]*)`", line.split("|")[1])
    }
    assert {kind.value for kind in EventKind} - documented == set()


CITES_SPEC = re.compile(r"\bSPEC\.md\b|\bSPEC (says|requires)\b|\(SPEC\)")


def test_no_document_cites_a_missing_spec() -> None:
    """The README, the docs and the code cite the project's own documents, not a SPEC.md it lacks."""
    root = DOCS.parent
    texts = [root / "README.md", *DOCS.glob("*.md"), *(root / "service").rglob("*.py")]
    texts += [*(root / "workers").rglob("*.py"), *(root / "tests").glob("test_*.py")]
    citing = [
        str(p.relative_to(root))
        for p in texts
        if p.name != "test_docs.py" and CITES_SPEC.search(p.read_text())
    ]
    assert citing == []


async def test_arq_reads_tunefleets_jobs_with_the_documented_deserializer(
    fleet: Fleet, tmp_path: Path
) -> None:
    """As docs/architecture.md says, arq's Job reads a tunefleet job with `_deserializer=json.loads`, and
    cannot with its default (pickle)."""
    from arq.jobs import DeserializationError, Job

    assert "_deserializer=json.loads" in ARCHITECTURE.read_text()
    await fleet.start_tuning(write_tuning(tmp_path / "t", [case("c0")]))
    async with fleet.client() as client:
        job_id = "case:t1:c0:1"
        info = await Job(
            job_id, client.redis, _queue_name=fleet.settings.queue, _deserializer=json.loads
        ).info()
        assert info is not None and info.function == "run_case"
        assert list(info.args) == [{"tuning": "t1", "case": "c0", "rev": 1}]
        with pytest.raises(DeserializationError):
            await Job(job_id, client.redis, _queue_name=fleet.settings.queue).info()
