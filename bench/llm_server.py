"""The llm benchmark's row against a real server: llama-cpp-python serving SmolLM2-135M-Instruct
(tests/support/llama.py), behind the tests' recording server (tests/support/fake_openai.py relays
every call and notes when it arrived and when its answer came back).

A tuning of CASES cases with the model in every role (provider concurrency CONCURRENCY) runs on one
worker; then a process of its own sends the very requests the fleet sent, through the `openai` SDK with
one client at the same concurrency. For each, the server's busy share: the time at least one call was
at the server over the time from the first call's arrival to the last answer. The fleet keeps a real
server as busy as a tight SDK loop does when its own work between two calls (the run step, the records,
the next step's start) hides behind the calls of its other lanes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import ROOT, Env, Figure, run_async, wait_for
from tests.support.fake_openai import FakeOpenAI, Forward, Recorded, Scripted
from tests.support.fleet import write_tuning
from tests.support.llama import MODEL, LlamaServer, find_model

CASES = 3
ROW = "llama.cpp server busy share during a tuning, concurrency {c}"
TARGET = ">= 95 % of the baseline"
CONCURRENCY = 2
PROMPTS = ROOT / "examples" / "llm-demo" / "prompts"
CASE_INPUTS = [
    ("greet", "A customer named Ada says hello. Greet her.", "The answer greets Ada by name."),
    ("hours", "When does the shop open on Saturday? It opens at 9 am.", "The answer says 9 am."),
    ("refund", "Can a damaged book be returned? Yes, within 30 days.", "The answer names the 30 days."),
]


def relay(body: dict[str, Any]) -> Scripted:
    return Forward()


def busy_share(requests: list[Recorded]) -> tuple[float, float]:
    """(the share of the span during which a call was at the server, the span in seconds)."""
    spans = sorted((r.at, float(r.answer["done_at"])) for r in requests if "done_at" in r.answer)
    if not spans:
        return 0.0, 0.0
    busy = 0.0
    start, end = spans[0]
    for began, ended in spans[1:]:
        if began > end:
            busy += end - start
            start, end = began, ended
        else:
            end = max(end, ended)
    busy += end - start
    total = max(e for _, e in spans) - spans[0][0]
    return busy / total if total else 0.0, total


def adapter(base_url: str) -> dict[str, Any]:
    return {
        "kind": "llm",
        "base_url": base_url,
        "model": MODEL,
        "api_key_env": None,
        "temperature": 0.2,
        "max_output_tokens": 160,
        "timeout_s": 600,
        "max_retries": 0,
        "concurrency": CONCURRENCY,
        "prompts": {"analyze": str(PROMPTS / "analyze.md"), "apply": str(PROMPTS / "apply.md")},
    }


def figures(env: Env) -> list[Figure]:
    found = find_model()
    if not isinstance(found, Path):  # the row stays in the table, unmeasured and not met
        return [Figure("llm", ROW.format(c=CONCURRENCY), None, "%", target=TARGET, met=False, note=found)]
    with (
        LlamaServer(env.root / "llama.log") as llama,
        FakeOpenAI(responder=relay, upstream=llama.root) as server,
    ):
        llm = adapter(server.base_url)
        cases = [
            {"id": name, "rev": 1, "input": text, "rubric": [{"id": "met", "text": rubric}]}
            for name, text, rubric in CASE_INPUTS[:CASES]
        ]
        tuning_file = write_tuning(
            env.root / "llama", [], name="llama", runner=llm, analyzer=llm, applier=llm, tries=2, mem_tries=1
        )
        tuning = run_async(env.register(tuning_file))
        worker = env.start_worker(CASES)
        env.wait_worker_ready(worker)
        run_async(env.submit(tuning, cases))
        wait_for(lambda: env.results_done(tuning) >= CASES, 1200, "the llama tuning", worker, interval_s=0.2)
        worker.kill()
        worker.wait()
        fleet_calls = list(server.requests)
        bodies = [r.body for r in fleet_calls if r.answer.get("status") == 200]
        path = env.root / "llama-bodies.json"
        path.write_text(json.dumps(bodies))
        first = len(server.requests)
        subprocess.run(
            [
                *(sys.executable, "-m", "bench.llm_baseline", "replay", server.base_url),
                *("--concurrency", str(CONCURRENCY), str(path)),
            ],
            check=True,
            capture_output=True,
            cwd=ROOT,
            env=env.child_env(),
            timeout=1800,
        )
        sdk_calls = server.requests[first:]
    if len(sdk_calls) != len(bodies):
        raise RuntimeError(f"the SDK loop made {len(sdk_calls)} calls, not {len(bodies)}")
    fleet_share, fleet_s = busy_share(fleet_calls)
    sdk_share, sdk_s = busy_share(sdk_calls)
    formats = Counter(r.format_type for r in fleet_calls)
    return [
        Figure(
            "llm",
            ROW.format(c=CONCURRENCY),
            100 * fleet_share,
            "%",
            100 * sdk_share,
            f"the same {len(bodies)} requests from `openai.AsyncOpenAI` directly, {CONCURRENCY} at once",
            target=TARGET,
            met=fleet_share >= 0.95 * sdk_share,
            note=(
                f"SmolLM2-135M-Instruct on llama-cpp-python (2 threads), {CASES} cases with the model in "
                f"every role ({dict(env_states(env))}), {len(fleet_calls)} calls by format {dict(formats)}; "
                f"span {fleet_s:.1f} s against {sdk_s:.1f} s for the SDK loop"
            ),
        )
    ]


def env_states(env: Env) -> Counter[str]:
    results = (env.settings.store / "tunings" / "llama" / "cases").glob("*/r*/result.json")
    return Counter(json.loads(p.read_text())["state"] for p in results)
