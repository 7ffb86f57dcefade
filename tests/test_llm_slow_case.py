"""A case whose own calls outlast `timeout_s`, told from a provider that is down, when no other call is
there to compare with: the provider is asked a one-token question first (workers.adapters.llm.probe)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from service.core import keys
from service.core.models.status import CaseDetail
from tests.support.fake_openai import FakeOpenAI, Reply, Scripted, Status
from tests.support.fleet import Fleet, demo_adapter, settings_env, write_tuning
from tests.support.redis_server import RedisServer
from tests.test_llm_accounting import TIMEOUT_S, adapter, case, verdict, words

PROBE_TOKENS = (9, 1)


def tunefleet(fleet: Fleet, *args: str) -> str:
    """`tunefleet ARGS` as a real process; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "service", *args],
        env={**os.environ, **settings_env(fleet.settings), "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def is_probe(body: dict[str, Any]) -> bool:
    return "response_format" not in body and body.get("max_tokens") == 1


async def test_the_last_case_standing_whose_analyses_outlast_timeout_s_fails_in_bounded_time_and_spend(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A lone case whose analyses take three times `timeout_s`, against a server that answers the probe
    at once, ends `failed` naming the timeouts, with no `provider_down` hand-back: each timed-out attempt
    is followed by one probe, so the server sees timeouts_max (2) analyses and 2 probes; the time is
    bounded by timeouts_max x (timeout_s + the probe) + one retry wait (<= retry_wait_max_s 0.2 s) plus
    the worker's start; the recorded spend by 2 x (the analysis prompt, estimated by the server's own
    tokenizer) + 2 x (9 + 1) probe tokens, that is at most what the server billed for those calls (the
    demo runner's run reports no tokens)."""

    def responder(body: dict[str, Any]) -> Scripted:
        if is_probe(body):
            return Reply("OK", *PROBE_TOKENS)
        text = "\n".join(str(m["content"]) for m in body["messages"])
        return Reply(verdict(body), words(text), 30, delay_s=TIMEOUT_S * 3)

    with FakeOpenAI(responder=responder, tokenizer=words) as server:
        llm = adapter(server)
        slow = {**case("slow"), "demo": {"tokens": 0}}
        tuning = write_tuning(tmp_path / "t", [slow], runner=demo_adapter(), analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        began = time.monotonic()
        fleet.start_worker(2)
        rows = await fleet.wait_finished(1, timeout_s=60)
        took_s = time.monotonic() - began
        await fleet.wait_counted(1)
        async with fleet.client() as client:
            status = await client.status()
        billed = server.billed_tokens
        requests = list(server.requests)
    row = rows["slow"]
    assert row.state == "failed" and "timed out 2 times" in (row.reason or ""), row.reason
    assert not [e for e in fleet.events() if e["kind"] == "provider_down"]
    probes = [r for r in requests if is_probe(r.body)]
    analyses = [r for r in requests if not is_probe(r.body)]
    assert (len(analyses), len(probes)) == (2, 2)
    # The calls above are the bound (two analyses, two probes); the time only tells "ended" from the old
    # "handed back every 60 s forever", with room for a loaded CI machine's slow worker start.
    assert took_s < 120, took_s
    [counted] = status.tunings
    prompt_tokens = max(words(r.text) for r in analyses)
    overhead = 4 * (2 + 1)  # MESSAGE_OVERHEAD_TOKENS per message and one more
    assert counted.tokens <= 2 * (prompt_tokens + overhead) + 2 * sum(PROBE_TOKENS), counted.tokens
    assert counted.tokens <= billed, (counted.tokens, billed)


async def test_a_provider_down_for_good_ends_the_case_failed_after_provider_handbacks_max(
    fleet: Fleet, tmp_path: Path, redis_server: RedisServer
) -> None:
    """Against a provider that answers only 503, a case is handed back provider_handbacks_max (2) times
    (two `provider_down` events), then ends `failed` naming the hand-backs and the provider's last error;
    its hand-back count is gone from Redis once it ended; its two hand-backs, each with the provider's
    error, show in `tunefleet show` (JSON and text) and in its result.json, with what they spent (0 here:
    a 503 bills nothing)."""
    with FakeOpenAI(responder=lambda body: Status(503)) as server:
        llm = adapter(server, max_retries=0)
        down = {**case("down"), "demo": {"tokens": 0}}
        tuning = write_tuning(tmp_path / "t", [down], runner=demo_adapter(), analyzer=llm, applier=llm)
        await fleet.start_tuning(tuning)
        fleet.start_worker(2, TUNEFLEET_PROVIDER_RETRY_S="0.2", TUNEFLEET_PROVIDER_HANDBACKS_MAX="2")
        rows = await fleet.wait_finished(1, timeout_s=60)
    reason = rows["down"].reason or ""
    assert rows["down"].state == "failed" and "through 2 hand-backs" in reason and "503" in reason, reason
    downs = [e for e in fleet.events() if e["kind"] == "provider_down"]
    assert [e["data"]["handbacks"] for e in downs] == [1, 2]
    assert not redis_server.exists(keys.handbacks("case:t1:down:1"))
    shown = CaseDetail.model_validate_json(tunefleet(fleet, "show", "t1", "down", "--json"))
    assert [h.count for h in shown.handbacks] == [1, 2] and all("503" in h.error for h in shown.handbacks)
    assert shown.result is not None and shown.result["handbacks"] == 2
    assert shown.result["handback_usage"]["input_tokens"] == 0
    assert "provider hand-backs: 2" in tunefleet(fleet, "show", "t1", "down")
