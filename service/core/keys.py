"""Every Redis key tunefleet uses, built in one place (arq's own key names come from
service.core.io.arq_contact).

Ownership is documented in docs/architecture.md.
"""

from __future__ import annotations

import hashlib

from service.core.io.arq_contact import IN_PROGRESS_PREFIX, JOB_PREFIX, RESULT_PREFIX, RETRY_PREFIX

PREFIX = "tf"


def lease(job_id: str) -> str:
    """STRING, PX: the fencing token of the worker running the case."""
    return f"{PREFIX}:lease:{job_id}"


def holder(job_id: str) -> str:
    """STRING `<token>@<worker>`: the last lease granted for the case; deleted on a clean release
    (lease-loss detection)."""
    return f"{PREFIX}:holder:{job_id}"


def losses(job_id: str) -> str:
    """STRING counter: how often the case's lease expired under a worker."""
    return f"{PREFIX}:losses:{job_id}"


def handbacks(job_id: str) -> str:
    """STRING counter: how often the job was handed back because its LLM provider stayed down (bounded by
    `provider_handbacks_max`); deleted when the job ends (FINISH), else expires a week after the last."""
    return f"{PREFIX}:handbacks:{job_id}"


def gate_passed(tuning: str, seed: int) -> str:
    """ZSET (every score 0, so ordered by member): the tuning's cases that ended `completed`, each as
    `<its gate rank under seed, hex>:<case id>`, and a `!built:<tuning file's mtime>` member once the
    store's walk filled it (service.kinds.evals.gate.index). No expiry: one member per case."""
    return f"{PREFIX}:gate-passed:{tuning}:{seed}"


def suspect(job_id: str) -> str:
    """STRING `group` or `isolate`: present while a case that lost its lease beside other cases is
    suspected of killing its worker (workers/lease.py); deleted when it records a step or ends."""
    return f"{PREFIX}:suspect:{job_id}"


def worker_cases(name: str) -> str:
    """SET: the job ids a worker holds leases on; left as it was when the worker died (a lost lease's
    company), removed from on every clean release; expires a day after the last lease."""
    return f"{PREFIX}:worker-cases:{name}"


def worker_suspects(name: str) -> str:
    """SET: the suspects among a worker's cases (kept like `worker_cases`); removed from when cleared."""
    return f"{PREFIX}:worker-suspects:{name}"


def free_slots() -> str:
    """HASH: worker name -> `<free slots>:<Redis time ms>`, written by each claiming poll (fair claims)."""
    return f"{PREFIX}:free-slots"


def fence() -> str:
    """STRING counter: the fleet-wide source of fencing tokens (case leases and the lock)."""
    return f"{PREFIX}:fence"


def lock(tuning: str) -> str:
    """STRING, PX: the improvements lock of a tuning; holds the holder's fencing token."""
    return f"{PREFIX}:lock:{tuning}"


def lock_holder(tuning: str) -> str:
    """STRING, PX: the job id of the apply holding the tuning's lock, set, renewed and deleted with it
    (status names the holder from the moment of the grant)."""
    return f"{PREFIX}:lock:{tuning}:holder"


def lock_pending(tuning: str) -> str:
    """ZSET: one member per apply waiting for or holding the lock, score = expiry (ms)."""
    return f"{PREFIX}:lock-pending:{tuning}"


def version(tuning: str) -> str:
    """STRING: the current system version (commit) of a tuning; set only by a fenced publish."""
    return f"{PREFIX}:version:{tuning}"


def mirror(tuning: str) -> str:
    """HASH: the daemon's push of a tuning's current version to its `remote` (`MirrorState`)."""
    return f"{PREFIX}:mirror:{tuning}"


def breaker() -> str:
    """HASH: the fleet-wide sandbox circuit breaker."""
    return f"{PREFIX}:breaker"


def store_full() -> str:
    """STRING: set (NX) by the first worker that found the store full (`<worker>: <reason>`); deleted by
    the first good probe (workers.store_full)."""
    return f"{PREFIX}:store-full"


def store_probe(worker: str) -> str:
    """STRING: a worker's probe of a full Redis (a write that succeeds once Redis has room), short-lived."""
    return f"{PREFIX}:store-probe:{worker}"


def events() -> str:
    """STREAM: every tuning's events, capped."""
    return f"{PREFIX}:events"


def stats(tuning: str) -> str:
    """HASH: live counters of a tuning (states, runs by outcome, tokens, cost)."""
    return f"{PREFIX}:stats:{tuning}"


def running(tuning: str) -> str:
    """HASH: job id -> JSON of the running case (worker, step, since)."""
    return f"{PREFIX}:running:{tuning}"


def workers() -> str:
    """ZSET: worker name -> last heartbeat (ms)."""
    return f"{PREFIX}:workers"


def worker(name: str) -> str:
    """STRING, PX: JSON of a worker's slots and cases."""
    return f"{PREFIX}:worker:{name}"


def tunings() -> str:
    """SET: the names of the tunings the fleet knows."""
    return f"{PREFIX}:tunings"


def paused() -> str:
    """STRING: present while the fleet is paused (no run starts)."""
    return f"{PREFIX}:paused"


def held() -> str:
    """HASH: tuning -> JSON `Hold`: no run of that tuning starts while it is set."""
    return f"{PREFIX}:held"


def budget_waived() -> str:
    """HASH: tuning -> JSON of the budget `tunefleet resume TUNING` waived (no budget hold while it is
    the tuning's budget; registering another budget re-arms it)."""
    return f"{PREFIX}:budget-waived"


def llm_provider(base_url: str, model: str) -> str:
    """The id of one LLM provider (a server and a model) in key names: a hash of both, 16 hex digits."""
    return hashlib.sha256(f"{base_url}\n{model}".encode()).hexdigest()[:16]


def llm_permits(provider: str) -> str:
    """ZSET: holder id -> expiry (ms): the calls to an LLM provider under way (its `concurrency`)."""
    return f"{PREFIX}:llm-permits:{provider}"


def llm_waiters(provider: str) -> str:
    """ZSET: holder id -> when it first asked (ms): the calls waiting for one of an LLM provider's
    permits, oldest first (a permit given back goes to the oldest)."""
    return f"{PREFIX}:llm-waiters:{provider}"


def llm_waiting(provider: str) -> str:
    """ZSET: holder id -> expiry (ms) of its wait, renewed at each ask: a waiter that stops asking (its
    worker died) leaves `llm_waiters` when it lapses."""
    return f"{PREFIX}:llm-waiting:{provider}"


def llm_grants(provider: str) -> str:
    """Pub/sub CHANNEL: the holder ids (space-separated) a give-back of the provider's permits handed a
    permit to; each worker wakes its own."""
    return f"{PREFIX}:llm-grants:{provider}"


def llm_tokens(provider: str) -> str:
    """ZSET: `<call id>:<tokens>` -> when (ms): an LLM provider's tokens of the last minute."""
    return f"{PREFIX}:llm-tokens:{provider}"


def llm_format(provider: str) -> str:
    """STRING, EX a day: the response format an LLM provider was found to take (structured_output auto)."""
    return f"{PREFIX}:llm-format:{provider}"


def llm_answered(provider: str) -> str:
    """STRING, PX: when (Redis ms) an LLM provider last answered a call, marked at most once a second
    per worker: a call that times out while it answers others is its step's fault, not an outage."""
    return f"{PREFIX}:llm-answered:{provider}"


def llm_limits() -> str:
    """HASH: LLM provider id -> JSON `{limit, max, changed_ms, cuts, name}`: the fleet-wide permits of a
    provider that answered 429, lowered then and raised again slowly (adaptive concurrency); a provider
    back at its configured `concurrency` has no field."""
    return f"{PREFIX}:llm-limits"


def cancelled(tuning: str) -> str:
    """SET: the job ids (`case:<tuning>:<case>:<rev>`) of a tuning's cases that `cancel` cancelled, one per
    case (cancelling a whole tuning adds each unfinished case); a worker checks it when it claims a case
    and at every poll while it runs one."""
    return f"{PREFIX}:cancelled:{tuning}"


GOALS_SCOPE = "_goals"
"""Where goals stand among the per-tuning keys (never a tuning's name: a slug cannot start with `_`)."""


def goals() -> str:
    """HASH: goal id -> JSON `GoalSummary`: status, iteration, step, worker."""
    return f"{PREFIX}:goals"


def goals_cancelled() -> str:
    """SET: the job ids (`goal:<id>`) of cancelled goals (a goal's lease is taken with GOALS_SCOPE)."""
    return cancelled(GOALS_SCOPE)


def evals() -> str:
    """HASH: evaluation id -> JSON `EvalHead` (service.kinds.evals.models): its tuning, version, items; its
    progress is in its tuning's counters (`stats`, service.kinds.evals.counters)."""
    return f"{PREFIX}:evals"


def arq_in_progress(job_id: str) -> str:
    return IN_PROGRESS_PREFIX + job_id


def arq_job(job_id: str) -> str:
    return JOB_PREFIX + job_id


def arq_result(job_id: str) -> str:
    return RESULT_PREFIX + job_id


def arq_retry(job_id: str) -> str:
    return RETRY_PREFIX + job_id


def daemon() -> str:
    """STRING, PX: JSON of the daemon that serves the fleet (`DaemonHolder`); a second daemon is refused."""
    return f"{PREFIX}:daemon"


def epoch() -> str:
    """STRING: set by the daemon; its absence means Redis lost the fleet's state."""
    return f"{PREFIX}:epoch"
