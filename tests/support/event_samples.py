"""One event of every kind as the fleet writes it: its envelope's fields and its data, the keys and
value types its emit sites give (and the events files of the fleet's test runs show), so that a test can
send each kind through the sink and read it back."""

from __future__ import annotations

from typing import Any

from service.core.models.events import EventKind

K = EventKind
SHA = "0123456789abcdef0123456789abcdef01234567"
LEASE = {"lease": 7, "lost_leases": 1, "suspect": None, "try": 2}
ITEM = {"eval": "e-1", "repeat": 2}
ECHO = {"kind": "echo", "job": "e1"}
CASE = {"case": "c1", "rev": 1}
TRY = {**CASE, "phase": "nomem", "attempt": 1}
GOAL = {"goal": "g1", "iteration": 2}
VERDICT = {"gate_eval": "gate-1", "candidate": SHA, "broken": ["c2"], "items": 4, "judged": True,
           "gate_tokens": 120, "gate_cost_usd": 0.25, "ref": None}  # fmt: skip
TEST_FIGURES = {"rule": "test", "rounds": 3, "runs": 240, "statistic": 2.4, "bound": 2.3,
                "futility": -1.1, "difference": 0.01, "lower": -0.09, "pairs": 120,
                "planned_pairs": 404, "stopped_early": True}  # fmt: skip
GATE = {"verdict": "passed", "candidate": SHA, "eval": "gate-1", "broken": [], "rebased": False, "why": "ok"}

SAMPLES: dict[EventKind, dict[str, Any]] = {
    K.JOB_STARTED: {"data": {**LEASE, **ECHO}},
    K.JOB_REQUEUED: {"detail": "the worker stopped", "data": ECHO},
    K.JOB_ENDED: {"detail": "cancelled", "data": {"state": "cancelled", **ECHO}},
    K.CASE_QUEUED: CASE,
    K.CASE_REQUEUED: {**CASE, "detail": "busy", "data": {"retry_in_s": 30.0}},
    K.CASE_STARTED: {**CASE, "data": LEASE},
    K.LEASE_LOST: {**CASE, "detail": "lease lost", "data": ITEM},
    K.PROVIDER_DOWN: {**CASE, "detail": "503", "data": {"retry_in_s": 60.0, **ITEM}},
    K.CASE_COMPLETED: {**CASE, "phase": "mem", "data": {"steps": 9}},
    K.CASE_DIFFICULT: {**CASE, "detail": "out of tries", "data": {"steps": 12}},
    K.CASE_FAILED: {**CASE, "detail": "fault", "data": {"steps": 3}},
    K.CASE_CANCELLED: {**CASE, "detail": "cancelled before it started"},
    K.STEP_STARTED: {**TRY, "step": "apply", "data": {"fence": 4, "lock_wait_ms": 12}},
    K.STEP_FINISHED: {
        **TRY,
        "step": "apply",
        "duration_ms": 830,
        "tokens": 1200,
        "cost_usd": 0.01,
        "data": {"outcome": "published", "version": SHA, "fence": 4, "gate": GATE},
    },
    K.RUN_WAITS_FOR_RESUME: {**TRY, "data": ITEM},
    K.RUN_WAITS_FOR_HOLD: {**TRY, "detail": "budget spent", "data": {"kind": "budget"}},
    K.RUN_WAITS_FOR_SANDBOX: TRY,
    K.RUN_WAITS_FOR_APPLY: {**TRY, "data": {"applies": 2}},
    K.RUN_SANDBOX_DOWN: {**TRY, "detail": "no sandbox", "data": ITEM},
    K.ATTEMPT_SET_ASIDE: {**TRY, "detail": "void: crash", "data": {"folder": "1.void-1"}},
    K.ANALYSIS_EDITED_SYSTEM: {**TRY, "detail": "discarded"},
    K.APPLY_WAITS_FOR_LOCK: TRY,
    K.APPLY_RECOVERED: {**TRY, "detail": SHA[:12]},
    K.APPLY_ABANDONED: {**TRY, "detail": "lock lost"},
    K.MEMORY_SUBMITTED: {**TRY, "phase": "mem", "detail": "memory/c1.md"},
    K.SPEND_RECORDED: {**TRY, "step": "run", "tokens": 50, "estimated_tokens": 50, "data": ITEM},
    K.TUNING_HELD: {**CASE, "detail": "budget spent", "data": {"kind": "budget", **ITEM}},
    K.TUNING_RELEASED: {"detail": "resumed"},
    K.BREAKER_OPENED: {"detail": "sandbox down"},
    K.BREAKER_PROBED: {"detail": "sandbox works", "data": {"closed": True}},
    K.BREAKER_CLOSED: {},
    K.STORE_FULL: {"detail": "no space left on the store's disk"},
    K.STORE_RECOVERED: {"detail": "after 6 s"},
    K.GOAL_STARTED: {"goal": "g1", "detail": "a goal"},
    K.GOAL_RESUMED: {**GOAL, "detail": "taken by w1"},
    K.ITERATION_STARTED: GOAL,
    K.GOAL_REQUEUED: {"goal": "g1", "detail": "busy", "data": {"retry_in_s": 30.0}},
    K.STEP_WAITS_FOR_RESUME: {**GOAL, "step": "work"},
    K.STEP_WAITS_FOR_HOLD: {**GOAL, "step": "work", "data": {"kind": "auth"}},
    K.STEP_WAITS_FOR_SANDBOX: {**GOAL, "step": "work"},
    K.STEP_SET_ASIDE: {**GOAL, "step": "work", "detail": "void: crash", "data": {"voids": 1}},
    K.PLAN_INVALID: {**GOAL, "step": "plan", "detail": "no TODO"},
    K.REVIEW_INVALID: {**GOAL, "step": "review", "detail": "bad JSON"},
    K.REVIEW_COMPLETE_TOO_EARLY: {**GOAL, "step": "review"},
    K.GOAL_COMPLETED: {**GOAL, "detail": "done", "data": {"limit": None}},
    K.GOAL_INCOMPLETE: {**GOAL, "detail": "limit", "data": {"limit": "max_iterations"}},
    K.GOAL_FAILED: {**GOAL, "detail": "voids", "data": {"limit": None}},
    K.GOAL_CANCELLED: {"goal": "g1", "detail": "asked"},
    K.EVAL_CREATED: {
        "detail": "4 items",
        "data": {"eval": "e-1", "items": 4, "version": SHA, "purpose": "user"},
    },
    K.EVAL_ITEM_STARTED: {**CASE, "data": {**LEASE, **ITEM}},
    K.EVAL_ITEM_SET_ASIDE: {**CASE, "detail": "void: crash", "data": {"folder": "1.void-1", **ITEM}},
    K.EVAL_ITEM_REQUEUED: {**CASE, "detail": "the worker stopped", "data": ITEM},
    K.EVAL_ITEM_ENDED: {**CASE, "detail": "graded", "data": {"outcome": "pass", **ITEM}},
    K.GATE_STARTED: {**TRY, "step": "apply", "data": {"gate_eval": "gate-1", "candidate": SHA, "items": 4}},
    K.GATE_PASSED: {**TRY, "step": "apply", "detail": "ok", "data": {**VERDICT, **TEST_FIGURES}},
    K.GATE_REJECTED: {**TRY, "step": "apply", "detail": "broke c2", "data": {**VERDICT, "ref": "refs/x"}},
    K.CANDIDATE_REBASED: {
        **TRY,
        "step": "apply",
        "data": {"candidate": SHA, "onto": SHA, "version": SHA, "rerun": False},
    },
    K.GATE_ABANDONED: {**TRY, "step": "apply", "data": {"gate_eval": "gate-1", "candidate": SHA}},
    K.CANDIDATE_AWAITS_APPROVAL: {**TRY, "step": "apply", "data": {"candidate": SHA}},
    K.CANDIDATE_DECIDED: {"case": "c1", "data": {"candidate": SHA, "verdict": "approved", "by": "cli"}},
}
"""Each kind's fields besides `at`, `kind`, `tuning` and `worker` (the sink's)."""
