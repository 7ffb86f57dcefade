"""Which commit an evaluation runs: `main` (the tuning's current version), `initial` (the version its
system was imported as) or a commit id of its system repository, resolved once, when it is created."""

from __future__ import annotations

from redis.asyncio import Redis

from service.core import keys
from service.core.errors import SystemRepoError
from service.core.io import objects
from service.core.io.git import run_git
from service.core.store import TuningStore
from service.core.system import MAIN_REF
from service.kinds.evals.errors import EvalInputError
from service.kinds.evals.models import COMMIT_RE


async def resolve_version(redis: Redis, tuning: TuningStore, asked: str, timeout_s: float) -> str:
    """The full commit id `asked` names in the tuning's system; EvalInputError naming what was asked
    and what is expected when it names none."""
    repo = f"--git-dir={tuning.repo}"
    if asked == "main":
        current = await redis.get(keys.version(tuning.name))
        if current is not None:
            return bytes(current).decode()
        answer = await run_git(repo, "rev-parse", "--verify", f"{MAIN_REF}^{{commit}}", timeout_s=timeout_s)
        return answer.out.decode().strip()
    if asked == "initial":
        answer = await run_git(repo, "rev-list", "--max-parents=0", MAIN_REF, timeout_s=timeout_s)
        roots = answer.out.decode().split()
        return roots[-1]
    if COMMIT_RE.fullmatch(asked):
        answer = await run_git(
            repo,
            "rev-parse",
            "--quiet",
            "--verify",
            f"{asked}^{{commit}}",
            timeout_s=timeout_s,
            ok_exits=(0, 1, 128),
        )
        found = answer.out.decode().strip()
        if answer.exit == 0 and found:
            return found
    raise EvalInputError(
        f"tuning {tuning.name}: --version {asked!r}: no such version in its system repository; expected "
        "main, initial or the id of one of its commits (4 to 40 hex digits)"
    )


def current_main(tuning: TuningStore) -> str | None:
    """The tuning's current version as its store's repository names it (`main`), read in this process;
    None when the repository cannot tell (not imported yet)."""
    try:
        ref = objects.open_repository(tuning.repo).references.get(MAIN_REF)
    except (SystemRepoError, OSError, ValueError):
        return None
    return str(ref.target) if ref is not None else None


def asked_label(asked: str, version: str, main: str | None) -> str:
    """How a version asked as `asked` is labelled now: `main` only while it still is the tuning's current
    version (`was main` once main has moved on), else as asked."""
    if asked == "main" and main is not None and main != version:
        return "was main"
    return asked
