"""What the fleet keeps of an agent's output is capped (issue 12, item 10): a 20 MB analyzer summary
does not become a 40 MB notes file or API answer; it is kept truncated, and says so."""

from __future__ import annotations

from pathlib import Path

import httpx

from service.api.app import create_app
from service.client.client import TunefleetClient
from service.core.models.records import AGENT_TEXT_MAX_CHARS, Feedback
from tests.support.fleet import Fleet, write_tuning
from tests.test_command_loop import R1_CASE, agent, case_root, inline

HUGE_CHARS = 20_000_000
KEPT_BYTES = 4 * AGENT_TEXT_MAX_CHARS  # UTF-8 and JSON escapes: a few bytes a character at most

HUGE_ANALYZER = inline(
    "import json, sys\n"
    "feedback = {'verdict': 'pass', 'done': True, 'rubric': {'r1': 1.0}, 'summary': 'x' * 20_000_000}\n"
    "json.dump(feedback, open(sys.argv[1], 'w'))\n",
    "{feedback}",
)


async def test_a_huge_summary_is_kept_truncated(fleet: Fleet, tmp_path: Path) -> None:
    """An analyzer that writes a 20 MB summary: the case completes; feedback.json, notes.jsonl and the
    API's case detail each stay under a few hundred KiB, and the summary says it was truncated."""
    tuning = write_tuning(
        tmp_path / "t",
        [R1_CASE],
        runner=agent("normal", "run"),
        analyzer=HUGE_ANALYZER,
        applier=agent("normal", "apply"),
    )
    await fleet.start_tuning(tuning)
    fleet.start_worker()
    rows = await fleet.wait_finished(1, timeout_s=90)
    assert rows["c1"].state == "completed"
    root = case_root(fleet)
    feedback_file = root / "nomem" / "1" / "feedback.json"
    feedback = Feedback.model_validate_json(feedback_file.read_bytes())
    assert len(feedback.summary) == AGENT_TEXT_MAX_CHARS
    assert feedback.summary.endswith(
        f"truncated by the fleet: {HUGE_CHARS:,} characters, {AGENT_TEXT_MAX_CHARS:,} kept]"
    )
    assert feedback_file.stat().st_size < KEPT_BYTES
    assert (root / "notes.jsonl").stat().st_size < 2 * KEPT_BYTES
    settings = fleet.settings.model_copy(update={"api_public_read": True})
    async with TunefleetClient(settings) as client:
        app = create_app(client, settings)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as api:
            answer = await api.get("/api/tunings/t1/cases/c1")
    assert answer.status_code == 200 and len(answer.content) < 4 * KEPT_BYTES
