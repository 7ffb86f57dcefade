"""9. Fleet overhead per LLM call: a tuning whose analyzer and applier are `kind: llm` (provider
concurrency C), against the same calls made directly with the `openai` SDK at concurrency C, both
against one local OpenAI-compatible server (tests/support/fake_openai.py, in a thread of the harness)
that answers every call after a fixed LATENCY_S, in the same run.

The tuning has CASES cases with a zero-latency demo runner: PASSING of them pass at once (2 calls:
the nomem and mem analyses), the others lack one rule of their own (4 calls: an analysis that fails
naming the rule, an apply whose edit adds it, then the two analyses that pass). The fake model
answers by what the prompt quotes (the run's answer, the requested rule), so every call validates
and the number of calls is known. It runs twice on a real worker process: with C slots (no call waits
for a permit: the overhead is the step's own work around its call, then the case's loop until the
next call: the run step, the records, the next step's start) and
with a slot per case (every call waits for one of the C fleet-wide permits in Redis: the overhead
is the hand-off of a permit).

Times are the server's: from the first request's arrival to the last one's answer, the median of the
bench's first round and the LATER_ROUNDS (four) at its end: the runs' order and the applies'
convoys move one round's wall by a tenth, and a stall of the machine's (4 s once, in the first round
after the machine's setup) would decide a mean; the note gives every round and the mean too. The
fleet's added time per call is C / rate - C / baseline rate, the baseline's wall the median of six
runs (two after the first round, one before each later round): how much longer each of the C lanes is busy
per call than in a cost-free loop of the same cases (bench/llm_baseline.py `cases`, a process of its
own, one `openai.AsyncOpenAI` client, the fleet's recorded requests): the same slots taking the same
cases in order, each case's calls one after the other, one apply at a time under a lock, run starts
waiting for the pending applies, C permits; so what remains is the fleet's own time, not the order
its cases impose (a case's calls wait for each other; an apply holds the tuning's runs back). The
notes add the same requests replayed C at a time in no order (the server's throughput with no call
waiting for another), and with a new client per call. Then the LLM step alone against the SDK's call, one call
at a time in one process (bench/llm_step.py); the last row runs against a real server
(bench/llm_server.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from datetime import datetime
from itertools import pairwise
from statistics import mean
from typing import Any

from bench import fs_probe, llm_server, llm_step
from bench.common import ROOT, Env, Figure, cpu_seconds, median, run_async, steps_of, wait_for
from bench.profile import Profiler
from service.core import keys
from service.core.io.trees import entries_below
from tests.support.fake_openai import FakeOpenAI, Recorded, Reply, Scripted
from tests.support.fleet import case, demo_adapter, write_tuning

NAME = "llm"
CASES = 40
PASSING = 30
CONCURRENCY = 4
LATENCY_S = 0.05
MODEL = "bench-model"
LATER_ROUNDS = 4
"""The rounds of each kind at the bench's end, taken with its first (the median of the five), each after
a run of the cost-free loop (taken with its first two): one round's figure moves by two milliseconds either
way with the grouping of its applies, and one loop run's by as much (docs/benchmarks.md)."""
CALLS = PASSING * 2 + (CASES - PASSING) * 4

ANSWER_RE = re.compile(r"## Its answer\n\n(.*?)\n\n## Its error", re.S)
RULE_RE = re.compile(r"add rule (\S+)")


def feedback(answer: str) -> str:
    """The analyzer's answer: a fail naming the rule the run says is missing, else a pass."""
    missing = answer.removeprefix("missing: ") if answer.startswith("missing: ") else ""
    if not missing:
        scores = {"correct": 1.0, "brief": 1.0}
        return json.dumps({"verdict": "pass", "done": True, "rubric": scores, "summary": "It passes."})
    rule = missing.split(",")[0].strip()
    change = f"add rule {rule}\nThe instructions lack the line `- rule: {rule}`."
    return json.dumps(
        {
            "verdict": "fail",
            "done": False,
            "rubric": {"correct": 0.0, "brief": 1.0},
            "improvements": [{"target": "prose", "change": change}],
            "summary": f"The run misses {rule}.",
        }
    )


def edits(prompt: str) -> str:
    """The applier's answer: add the requested rule to rules.md."""
    match = RULE_RE.search(prompt)
    rule = match.group(1) if match else "none"
    edit = {"file": "rules.md", "old": "- rule: base\n", "new": f"- rule: base\n- rule: {rule}\n"}
    return json.dumps({"edits": [edit], "skills": [], "summary": f"added {rule}"})


def model(body: dict[str, Any]) -> Scripted:
    """The fake model: every answer after LATENCY_S, with a fixed usage."""
    prompt = str(body["messages"][-1]["content"])
    if body["response_format"]["json_schema"]["name"] == "edits":
        return Reply(edits(prompt), 800, 80, delay_s=LATENCY_S)
    match = ANSWER_RE.search(prompt)
    return Reply(feedback(match.group(1).strip() if match else ""), 1500, 120, delay_s=LATENCY_S)


def llm_adapter(server: FakeOpenAI) -> dict[str, Any]:
    return {
        "kind": "llm",
        "base_url": server.base_url,
        "model": MODEL,
        "api_key_env": None,
        "timeout_s": 30,
        "max_retries": 0,
        "concurrency": CONCURRENCY,
    }


def bench_cases(prefix: str) -> list[dict[str, Any]]:
    return [
        case(f"{prefix}{i:03d}") if i < PASSING else case(f"{prefix}{i:03d}", rules=[f"rule-{prefix}{i:03d}"])
        for i in range(CASES)
    ]


def server_wall(requests: list[Recorded]) -> float:
    """Seconds from the first request's arrival to the last one's answer (the server's clock)."""
    return max(r.at for r in requests) + LATENCY_S - min(r.at for r in requests)


def _at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["at"])).timestamp()


def step_ms(events: list[dict[str, Any]], step: str) -> list[float]:
    """Durations of the `step` steps (step_started to step_finished), in ms."""
    began: dict[tuple[Any, ...], float] = {}
    spans: list[float] = []
    for event in events:
        if event.get("step") != step:
            continue
        key = (event.get("case"), event.get("phase"), event.get("attempt"))
        if event["kind"] == "step_started":
            began[key] = _at(event)
        elif event["kind"] == "step_finished" and key in began:
            spans.append(1000 * (_at(event) - began.pop(key)))
    return spans


def gaps_ms(events: list[dict[str, Any]]) -> list[float]:
    """Within each case, from a step's end to the next step's start (the loop's own time between
    steps: records, events, the next step's checks), in ms."""
    ended: dict[Any, float] = {}
    gaps: list[float] = []
    for event in events:
        case = event.get("case")
        if event["kind"] == "step_finished":
            ended[case] = _at(event)
        elif event["kind"] == "step_started" and case in ended:
            gaps.append(1000 * (_at(event) - ended.pop(case)))
    return gaps


def call_gaps_ms(requests: list[Recorded], prefix: str) -> dict[str, list[float]]:
    """Within each case, from a call's answer to the case's next call's arrival (the server's clock), by
    the two calls' kinds (`feedback->edits`, say), in ms: what a case does between two calls (a run step,
    its records, the next phase's start; a wait for the pending applies or for the lock)."""
    gaps: dict[str, list[float]] = {}
    for calls in _by_case(requests, prefix).values():  # each case's in the order they came
        for before, after in pairwise(calls):
            kind = f"{before.schema_name}->{after.schema_name}"
            gaps.setdefault(kind, []).append(1000 * (after.at - before.at - LATENCY_S))
    return gaps


def gaps_note(fleet: dict[str, list[float]], loop: dict[str, list[float]]) -> str:
    """The median gap between a case's calls by kind, the fleet's against the loop's (one round each), and
    how much longer the fleet's gaps are in all (ms of the lanes' time)."""
    parts = []
    for kind in sorted(fleet):
        theirs = loop.get(kind, [])
        versus = f" (the loop: {median(theirs):.1f})" if theirs else ""
        parts.append(f"{kind} {median(fleet[kind]):.1f}{versus}")
    added = sum(sum(v) for v in fleet.values()) - sum(sum(v) for v in loop.values())
    return f"between a case's calls, median ms: {', '.join(parts)}; {added:.0f} ms more in all"


def import_cpu_s(log: str) -> float:
    """The CPU the worker spent importing the LLM adapters and the SDK (once per process, in a thread, at
    its first LLM job: its `llm_modules_loaded` lines). Left out of a round's CPU, as the SDK loop's own
    `import openai` is left out of its CPU (bench/llm_baseline.py measures from after its imports)."""
    lines = (json.loads(line) for line in log.splitlines() if line.startswith("{"))
    return sum(float(line["cpu_ms"]) for line in lines if line.get("event") == "llm_modules_loaded") / 1000


def fleet_round(
    env: Env,
    server: FakeOpenAI,
    name: str,
    slots: int,
    demo_ms: tuple[int, int] | None = None,
    **worker_env: str,
) -> dict[str, Any]:
    """One tuning of CASES cases on a fresh worker with `slots` slots; what the server and events saw.
    `demo_ms` (analyze, apply): the demo meta agent instead, its steps taking that long (the same steps
    as long as the calls' and the same cases in flight as long, no call: the loop's own CPU)."""
    meta = llm_adapter(server) if demo_ms is None else demo_adapter(0, *demo_ms)
    tuning_file = write_tuning(
        env.root / name, [], name=name, adapter=demo_adapter(0, 0, 0), analyzer=meta, applier=meta
    )
    tuning = run_async(env.register(tuning_file))
    log_file = env.root / f"worker-{len(env.procs.items)}.log"
    worker = env.start_worker(slots, **worker_env)
    env.wait_worker_ready(worker)
    first = len(server.requests)
    with Profiler(f"{NAME}-{name}", worker.pid):
        cpu0 = cpu_seconds(worker.pid)
        run_async(env.submit(tuning, bench_cases(name)))
        wait_for(
            lambda: env.results_done(tuning) >= CASES, 60, f"the cases of {name}", worker, interval_s=0.05
        )
        cpu = cpu_seconds(worker.pid) - cpu0
    # An idle worker gives the permits it kept back within KEEP_S (workers.adapters.llm.permits); the next
    # round's worker finds them free, as it would after a worker that goes on idling, not after a crash.
    permits = keys.llm_permits(keys.llm_provider(server.base_url, MODEL))
    wait_for(
        lambda: env.redis_server.zcard(permits) == 0, 10, f"the permits of {name}", worker, interval_s=0.02
    )
    worker.kill()
    worker.wait()
    requests = server.requests[first:]
    events = env.events(tuning)
    log = log_file.read_text()
    imported_s = import_cpu_s(log)
    results = list((env.settings.store / "tunings" / tuning / "cases").glob("*/r*/result.json"))
    states = Counter(json.loads(p.read_text())["state"] for p in results)
    return {
        "requests": requests,
        "wall": server_wall(requests) if requests else 0.0,
        "cpu": cpu - imported_s,
        "import_cpu_s": imported_s,
        "kinds": Counter(r.schema_name for r in requests),
        "steps": steps_of(events),
        "analyze_ms": step_ms(events, "analyze"),
        "apply_ms": step_ms(events, "apply"),
        "run_ms": step_ms(events, "run"),
        "gaps_ms": gaps_ms(events),
        "waited": log.count('"llm_call_waited"'),
        "states": states,
    }


def _by_case(requests: list[Recorded], prefix: str) -> dict[str, list[Recorded]]:
    """The requests by the case they name (each case's in the order sent)."""
    case_id = re.compile(rf"\b({re.escape(prefix)}\d{{3}})\b")
    grouped: dict[str, list[Recorded]] = {}
    for request in requests:
        found = case_id.search(request.text)
        if found is None:
            raise RuntimeError(f"a request names no case of {prefix}: {request.text[:200]!r}")
        grouped.setdefault(found.group(1), []).append(request)
    return grouped


def calls_by_case(requests: list[Recorded], prefix: str) -> list[list[dict[str, Any]]]:
    """The fleet's requests by case (each case's in the order sent; the cases in the order submitted)."""
    grouped = _by_case(requests, prefix)
    return [[request.body for request in grouped[key]] for key in sorted(grouped)]


def baseline(
    env: Env, server: FakeOpenAI, calls: list[Any], mode: str, *flags: str, seen: list[Recorded] | None = None
) -> tuple[float, float]:
    """The calls through the SDK in a process of its own (bench/llm_baseline.py, `mode` and `flags`);
    (the server's wall seconds, the process's CPU seconds over its calls). `seen` gets the requests."""
    path = env.root / "calls.json"
    path.write_text(json.dumps(calls))
    expected = sum(len(c) for c in calls) if mode == "cases" else len(calls)
    first = len(server.requests)
    argv = [sys.executable, "-m", "bench.llm_baseline", mode, server.base_url]
    done = subprocess.run(
        [*argv, "--concurrency", str(CONCURRENCY), *flags, str(path)],
        check=True,
        capture_output=True,
        cwd=ROOT,
        env=env.child_env(),
        timeout=60,
    )
    requests = server.requests[first:]
    if len(requests) != expected:
        raise RuntimeError(f"the baseline made {len(requests)} calls, not {expected}")
    if seen is not None:
        seen.extend(requests)
    return server_wall(requests), float(json.loads(done.stdout)["cpu_s"])


def check(got: dict[str, Any], name: str, env: Env) -> None:
    """Every case completed with the calls it should have made (else the figures mean nothing)."""
    calls = len(got["requests"])
    if got["states"] == Counter(completed=CASES) and calls == CALLS:
        return
    reasons = []
    for path in (env.settings.store / "tunings" / name / "cases").glob("*/r*/result.json"):
        result = json.loads(path.read_text())
        if result["state"] != "completed":
            reasons.append(f"{result['case']}: {result['state']}: {result.get('reason')}")
    raise RuntimeError(f"{name}: {dict(got['states'])}, {calls} calls, not {CALLS}; {reasons[:3]}")


def run() -> list[Figure]:
    figures: list[Figure] = []
    with Env(NAME) as env, FakeOpenAI(responder=model) as server:
        disk, tmpfs = fs_probe.inode_cost(env.root), fs_probe.tmpfs_cost()
        rounds = {"c": fleet_round(env, server, "c", CONCURRENCY)}
        kept = entries_below(env.settings.store / "tunings" / "c", limit=sys.maxsize)
        check(rounds["c"], "c", env)
        bodies = [r.body for r in rounds["c"]["requests"]]
        by_case = calls_by_case(rounds["c"]["requests"], "c")
        lanes = {key: ["--slots", str(slots)] for key, slots in (("c", CONCURRENCY), ("n", CASES))}
        loops = {key: [baseline(env, server, by_case, "cases", *lanes[key])] for key in lanes}
        shared = [baseline(env, server, bodies, "replay")]
        as_long = (round(median(rounds["c"]["analyze_ms"])), round(median(rounds["c"]["apply_ms"])))
        loop_only = fleet_round(env, server, "d", CONCURRENCY, demo_ms=as_long)
        rounds["n"] = fleet_round(env, server, "n", CASES)
        check(rounds["n"], "n", env)
        free = fleet_round(env, server, "w", CONCURRENCY, TUNEFLEET_WAIT_FOR_APPLY="false")
        check(free, "w", env)
        free_loop, _ = baseline(env, server, by_case, "cases", *lanes["c"], "--no-wait-for-apply")
        loop_requests: list[Recorded] = []
        for key in lanes:
            seen = loop_requests if key == "c" else None
            loops[key].append(baseline(env, server, by_case, "cases", *lanes[key], seen=seen))
        shared.append(baseline(env, server, bodies, "replay"))
        per_call, per_call_cpu = baseline(env, server, bodies, "replay-per-call")
        again: dict[str, list[dict[str, Any]]] = {"c": [], "n": []}
        for n in range(2, LATER_ROUNDS + 2):  # the two kinds taking turns, each round after a loop's run
            for key, slots in (("c", CONCURRENCY), ("n", CASES)):
                loops[key].append(baseline(env, server, by_case, "cases", *lanes[key]))
                again[key].append(fleet_round(env, server, f"{key}{n}", slots))
                check(again[key][-1], f"{key}{n}", env)
        max_in_flight = server.max_in_flight
    loop_gaps = call_gaps_ms(loop_requests, "c")
    base_wall = sum(w for w, _ in shared) / len(shared)
    base_cpu_ms = 1000 * sum(c for _, c in shared) / len(shared) / len(bodies)
    replay_rate = len(bodies) / base_wall
    replay_lane_ms = 1000 * CONCURRENCY / replay_rate
    per_call_lane_ms = 1000 * CONCURRENCY * per_call / len(bodies)
    label = f"a cost-free loop of the same cases, {CONCURRENCY} permits, `openai.AsyncOpenAI`"
    for key, slots in (("c", CONCURRENCY), ("n", CASES)):
        got = rounds[key]
        calls = len(got["requests"])
        walls = [got["wall"], *(later["wall"] for later in again[key])]
        rate = calls / median(walls)
        lane_ms = 1000 * CONCURRENCY / rate
        loop_wall = median([w for w, _ in loops[key]])
        base_rate = len(bodies) / loop_wall
        base_lane_ms = 1000 * CONCURRENCY / base_rate
        added = lane_ms - base_lane_ms
        where = f"{slots} slots" + (" (= concurrency)" if slots == CONCURRENCY else " (a slot per case)")
        analyze = median(got["analyze_ms"])
        apply = median(got["apply_ms"])
        common = (
            f"{CASES} cases ({dict(got['states'])}), {calls} calls ({dict(got['kinds'])}; expected {CALLS}), "
            f"concurrency {CONCURRENCY}, server latency {1000 * LATENCY_S:.0f} ms; {where}"
        )
        figures.append(
            Figure(
                NAME,
                f"LLM calls per second, {where}",
                rate,
                "calls/s",
                base_rate,
                label,
                note=(
                    f"{common}; server wall {median(walls):.2f} s (the median of {len(walls)} rounds, the "
                    f"first and the last {LATER_ROUNDS}: {', '.join(f'{w:.2f}' for w in walls)} s; mean "
                    f"{mean(walls):.2f} s) against {loop_wall:.2f} s for the cost-free loop (the median of "
                    f"its runs: {', '.join(f'{w:.2f}' for w, _ in loops[key])} s; bench/llm_baseline.py) "
                    f"and {base_wall:.2f} s for the same requests replayed {CONCURRENCY} at a time in no "
                    f"order, as if no call waited for another ({replay_rate:.1f} calls/s); ideal "
                    f"{CONCURRENCY / LATENCY_S:.0f} calls/s; most in flight at the server over the run: "
                    f"{max_in_flight}"
                ),
            )
        )
        figures.append(
            Figure(
                NAME,
                f"added wall per LLM call, {where}",
                added,
                "ms",
                target="<= 10 ms",
                met=added <= 10,
                note=(
                    f"{common}; {CONCURRENCY} / rate - {CONCURRENCY} / the cost-free loop's rate: each of "
                    f"the {CONCURRENCY} lanes is busy {lane_ms:.1f} ms per call (the loop: "
                    f"{base_lane_ms:.1f} ms; "
                    f"the replay in no order: {replay_lane_ms:.1f} ms, so {lane_ms - replay_lane_ms:.1f} ms "
                    f"added against it; a new client per call: {per_call_lane_ms:.1f} ms); "
                    f"median analyze step {analyze:.1f} ms, apply step {apply:.1f} ms "
                    f"(each holds one call of {1000 * LATENCY_S:.0f} ms), run step "
                    f"{median(got['run_ms']):.1f} ms, from a step's end to the case's next step's start "
                    f"{median(got['gaps_ms']):.1f} ms (mean {mean(got['gaps_ms']):.1f}); "
                    f"steps {dict(got['steps'])}; "
                    f"calls that waited >= 50 ms for a permit: {got['waited']}; worker CPU "
                    f"{1000 * got['cpu'] / calls:.1f} ms per call"
                    + (f"; {gaps_note(call_gaps_ms(got['requests'], key), loop_gaps)}" if key == "c" else "")
                ),
            )
        )
    figures.append(
        Figure(
            NAME,
            "folders and files a tuning keeps per LLM call",
            kept / CALLS,
            "inodes",
            note=(
                f"the {CONCURRENCY}-slot round's tuning folder: {kept} folders and files for {CALLS} calls "
                "(its steps' folders, logs, prompts and answers, records, memories, the "
                "version's git objects); each is an inode created while the case runs. This machine's "
                f"disk, in the bench's folder: {disk.text()}; "
                + (f"tmpfs: {tmpfs.text()}" if tmpfs is not None else "no tmpfs to compare")
                + " (bench/fs_probe.py: on ext4 without a journal the cost grows with the inodes freed "
                "in the last minutes, so the added wall above moves with the disk's state)"
            ),
        )
    )
    free_lane_ms = 1000 * CONCURRENCY * free["wall"] / len(free["requests"])
    free_base_ms = 1000 * CONCURRENCY * free_loop / len(bodies)
    figures.append(
        Figure(
            NAME,
            f"added wall per LLM call, {CONCURRENCY} slots, wait_for_apply off",
            free_lane_ms - free_base_ms,
            "ms",
            note=(
                f"the {CONCURRENCY}-slot round again with TUNEFLEET_WAIT_FOR_APPLY=false (run starts no "
                f"longer wait while an apply is pending), against the cost-free loop without that wait "
                f"({free_base_ms:.1f} ms per call and lane; the replay in no order: "
                f"{replay_lane_ms:.1f} ms); each lane busy {free_lane_ms:.1f} ms per call; median analyze "
                f"step {median(free['analyze_ms']):.1f} ms, run step {median(free['run_ms']):.1f} ms, from a "
                f"step's end to the next step's start {median(free['gaps_ms']):.1f} ms (mean "
                f"{mean(free['gaps_ms']):.1f}); worker CPU "
                f"{1000 * free['cpu'] / len(free['requests']):.1f} ms per call"
            ),
        )
    )
    cpu = {key: 1000 * got["cpu"] / len(got["requests"]) for key, got in rounds.items()}
    cpu_ms = median(list(cpu.values()))
    loop_ms = 1000 * loop_only["cpu"] / CALLS
    step_cpu_ms = cpu["c"] - loop_ms
    figures.append(
        Figure(
            NAME,
            "LLM step CPU per call (the worker's, less the loop's)",
            step_cpu_ms,
            "ms",
            base_cpu_ms,
            "the SDK process's CPU per call, one client",
            target="<= 2x the baseline",
            met=step_cpu_ms <= 2 * base_cpu_ms,
            note=(
                f"the 4-slot round's worker CPU per call ({cpu['c']:.1f} ms) less that of the same tuning "
                f"with the demo meta agent, its analyses taking {as_long[0]} ms and its applies "
                f"{as_long[1]} ms as the calls' steps did ({loop_ms:.1f} ms per call: the same steps "
                f"{dict(loop_only['steps'])} and states {dict(loop_only['states'])}, as many cases in flight "
                "as long, so the same leases and polls, no call): what an LLM call costs the worker (client, "
                "permit, prompt, validation, step files) beside the case loop"
            ),
        )
    )
    figures.append(
        Figure(
            NAME,
            "worker CPU per LLM call",
            cpu_ms,
            "ms",
            base_cpu_ms,
            "the SDK process's CPU per call, one client",
            note=(
                f"the worker's CPU (/proc/<pid>/stat) from the submission to the last result over its calls, "
                f"run steps and bookkeeping included, less its one-time import of the LLM adapters and the "
                f"SDK ({1000 * rounds['c']['import_cpu_s']:.0f} ms of CPU in the 4-slot round, logged as "
                f"`llm_modules_loaded`; the SDK loop's CPU is taken after its imports too): "
                f"{cpu['c']:.1f} ms with {CONCURRENCY} slots, "
                f"{cpu['n']:.1f} ms with {CASES}; median of the two rounds; the SDK process with a "
                f"new client per call: {1000 * per_call_cpu / len(bodies):.1f} ms per call"
            ),
        )
    )
    with Env(f"{NAME}-step") as env:
        figures += llm_step.figures(env)
    with Env(f"{NAME}-llama") as env:
        figures += llm_server.figures(env)
    return figures
