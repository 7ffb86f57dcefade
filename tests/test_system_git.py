"""Git failures are errors: the system repository's git calls, `commit_folder`, and the daemon's mirror.

Real git and real subprocesses throughout; a failing, missing or hanging git is a small shell script
put first on PATH, and a repository that refuses new objects has files where their folders go. The
mirror tests use a real Redis (the `settings` fixture) and local bare repositories as remotes, one of
which hangs in its `pre-receive` hook.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import structlog
from rich.console import Console

from service.cli.render import status_table
from service.client.client import TunefleetClient
from service.client.queries import fleet_status
from service.core.errors import SystemRepoError
from service.core.io.git import git
from service.core.io.objects import STREAMED_BYTES
from service.core.settings import FleetSettings
from service.core.system import SystemRepo
from service.daemon.main import Daemon
from service.daemon.mirror import Mirror
from tests.support.git import HANGING_HOOK, bare_remote, fake_git, refuse_new_objects, run

PROC = Path("/proc")


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie waiting to be reaped does not)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def write_system(source: Path) -> None:
    """A small system: prose files and an executable script."""
    (source / "skills").mkdir(parents=True)
    (source / "AGENTS.md").write_text("Be careful.\n")
    (source / "skills" / "style.md").write_text("Short sentences.\n")
    (source / "skills" / "check.sh").write_text("#!/bin/sh\necho ok\n")
    (source / "skills" / "check.sh").chmod(0o755)


async def new_repo(tmp_path: Path) -> tuple[SystemRepo, str]:
    source = tmp_path / "source"
    write_system(source)
    repo = SystemRepo(tmp_path / "system.git", tmp_path / "snapshots")
    return repo, await repo.init_from(source)


def tree_of(repo: SystemRepo, version: str) -> dict[str, str]:
    """Path -> "<mode> <content>" of every entry of `version`."""
    tree = {}
    for line in run(f"--git-dir={repo.repo}", "ls-tree", "-r", version).splitlines():
        meta, name = line.split("\t", 1)
        mode, _, blob = meta.split()
        tree[name] = f"{mode} {run(f'--git-dir={repo.repo}', 'cat-file', 'blob', blob)}"
    return tree


# commit_folder ------------------------------------------------------------------------------------


async def test_an_edited_folder_becomes_a_commit_on_base_with_exactly_its_content(tmp_path: Path) -> None:
    """Edits, additions and deletions in a plain folder become one commit whose parent is the base."""
    repo, base = await new_repo(tmp_path)
    folder = await repo.private_copy(base, tmp_path / "apply" / "system")
    (folder / "AGENTS.md").write_text("Be very careful.\n")
    (folder / "skills" / "new.md").write_text("A new skill.\n")
    (folder / "skills" / "check.sh").unlink()
    (folder / "README.md").symlink_to("AGENTS.md")
    (folder / ".gitignore").write_text("*.md\n")  # the agent's ignore file hides nothing from the commit

    version = await repo.commit_folder(folder, base, "tunefleet: apply c1\n\nTrailer: x\n")

    assert version is not None and version != base
    assert run(f"--git-dir={repo.repo}", "rev-parse", f"{version}^") == base
    assert tree_of(repo, version) == {
        ".gitignore": "100644 *.md",
        "AGENTS.md": "100644 Be very careful.",
        "README.md": "120000 AGENTS.md",
        "skills/new.md": "100644 A new skill.",
        "skills/style.md": "100644 Short sentences.",
    }
    assert await repo.message(version) == "tunefleet: apply c1\n\nTrailer: x"
    assert await repo.head() == base  # only the publish moves main


async def test_an_unchanged_folder_is_no_commit(tmp_path: Path) -> None:
    """A private copy left as it was (its executable bit included) commits nothing."""
    repo, base = await new_repo(tmp_path)
    assert tree_of(repo, base)["skills/check.sh"].startswith("100755 ")
    folder = await repo.private_copy(base, tmp_path / "apply" / "system")
    assert os.access(folder / "skills" / "check.sh", os.X_OK)

    assert await repo.commit_folder(folder, base, "nothing") is None
    assert not any(p.name.startswith("tunefleet-index-") for p in folder.parent.iterdir())


def plant_repository(folder: Path, marker: Path) -> None:
    """Make `folder` a git repository whose config runs a command (creating `marker`) on `git status`."""
    hook = folder.parent / f"fsmonitor-{marker.name}.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    hook.chmod(0o755)
    run("init", "--quiet", str(folder))
    run("config", "core.fsmonitor", str(hook), cwd=folder)


async def test_a_repository_planted_in_the_folder_is_never_read(tmp_path: Path) -> None:
    """A `.git` an agent plants in the folder, whose config runs a command, is neither run nor committed."""
    repo, base = await new_repo(tmp_path)
    control = await repo.private_copy(base, tmp_path / "control" / "system")
    plant_repository(control, tmp_path / "control-ran")
    run("status", "--short", cwd=control)  # git used as usual in the folder runs the planted command
    assert (tmp_path / "control-ran").exists()

    folder = await repo.private_copy(base, tmp_path / "apply" / "system")
    plant_repository(folder, tmp_path / "planted-ran")
    (folder / "AGENTS.md").write_text("Edited.\n")

    version = await repo.commit_folder(folder, base, "apply")

    assert version is not None
    assert not (tmp_path / "planted-ran").exists()
    assert ".git" not in {name.split("/")[0] for name in tree_of(repo, version)}
    assert tree_of(repo, version)["AGENTS.md"] == "100644 Edited."


async def test_a_nested_repository_is_refused_not_committed_as_a_link(tmp_path: Path) -> None:
    """A git repository with a commit inside the folder is an error, not a gitlink in the new version."""
    repo, base = await new_repo(tmp_path)
    folder = await repo.private_copy(base, tmp_path / "apply" / "system")
    nested = folder / "skills" / "vendored"
    nested.mkdir()
    (nested / "x.md").write_text("x\n")
    run("init", "--quiet", str(nested))
    run(
        "-c",
        "user.name=a",
        "-c",
        "user.email=a@b",
        "commit",
        "--quiet",
        "--allow-empty",
        "-m",
        "x",
        cwd=nested,
    )

    with pytest.raises(SystemRepoError, match="holds a git repository at skills/vendored"):
        await repo.commit_folder(folder, base, "apply")


async def test_a_link_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    """A symbolic link pointing out of the folder is refused: no snapshot of that version could hold it."""
    repo, base = await new_repo(tmp_path)
    folder = await repo.private_copy(base, tmp_path / "apply" / "system")
    (folder / "skills" / "secrets").symlink_to("../../../outside")

    with pytest.raises(SystemRepoError, match=r"symbolic link skills/secrets -> \.\./\.\./\.\./outside"):
        await repo.commit_folder(folder, base, "apply")


async def test_a_folder_becomes_the_tree_git_itself_would_stage(tmp_path: Path) -> None:
    """The tree recorded for a folder of folders, empty folders, an executable, links inside it and an
    ignore file is the one `git add --all --force` and `write-tree` make from the same folder; an
    attributes file asking git to convert line endings converts nothing: the version holds the bytes."""
    repo, base = await new_repo(tmp_path)
    folder = await repo.private_copy(base, tmp_path / "apply" / "system")
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "a" / "empty").mkdir()
    (folder / "a" / "b" / "deep.md").write_text("deep\r\n")
    (folder / "a" / "up").symlink_to("../AGENTS.md")
    (folder / "a" / "b" / "here").symlink_to("./deep.md")
    (folder / "tool").write_bytes(b"\x00\x01binary")
    (folder / "tool").chmod(0o700)
    (folder / ".gitignore").write_text("*\n")

    version = await repo.commit_folder(folder, base, "apply")

    assert version is not None
    index = tmp_path / "git-index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    plain = ["git", f"--git-dir={repo.repo}", f"--work-tree={folder}"]
    subprocess.run([*plain, "add", "--all", "--force", "."], cwd=folder, env=env, check=True)
    staged = subprocess.run([*plain, "write-tree"], env=env, check=True, capture_output=True, text=True)
    assert run(f"--git-dir={repo.repo}", "rev-parse", f"{version}^{{tree}}") == staged.stdout.strip()
    assert tree_of(repo, version)["tool"].startswith("100755 ")
    (folder / ".gitattributes").write_text("* text eol=lf\n")
    converted = await repo.commit_folder(folder, base, "attributes")
    blob = run(f"--git-dir={repo.repo}", "rev-parse", f"{converted}:a/b/deep.md")
    assert (
        subprocess.run(
            ["git", f"--git-dir={repo.repo}", "cat-file", "blob", blob], capture_output=True
        ).stdout
        == b"deep\r\n"
    )


async def test_a_large_file_is_recorded_and_extracted_whole(tmp_path: Path) -> None:
    """A file past the size read whole (it is streamed into its blob) is recorded byte for byte, and the
    new version's snapshot holds it byte for byte."""
    repo, base = await new_repo(tmp_path)
    folder = await repo.private_copy(base, tmp_path / "apply" / "system")
    data = os.urandom(STREAMED_BYTES + 12345)
    (folder / "big.bin").write_bytes(data)
    version = await repo.commit_folder(folder, base, "big")
    assert version is not None
    stored = subprocess.run(
        ["git", f"--git-dir={repo.repo}", "cat-file", "blob", f"{version}:big.bin"], capture_output=True
    )
    assert stored.stdout == data
    assert (await repo.snapshot(version) / "big.bin").read_bytes() == data


@pytest.mark.parametrize(
    ("plant", "refusal"),
    [
        (
            lambda f: os.mkfifo(f / "skills" / "pipe"),
            r"skills/pipe is not a file, a folder or a symbolic link",
        ),
        (lambda f: (f / "skills" / "x" / ".git").mkdir(parents=True), "holds a git repository at skills/x"),
        (lambda f: (f / "skills" / "far").symlink_to("../skills/../../x"), r"symbolic link skills/far -> "),
    ],
    ids=["pipe", "empty-nested-git", "link-out-midway"],
)
async def test_what_no_version_can_hold_is_refused_by_name(
    tmp_path: Path, plant: Callable[[Path], object], refusal: str
) -> None:
    """A pipe, any `.git` below the folder's top (a repository or an empty one) and a link that leaves the
    folder on its way are refused with an error naming them; nothing is committed."""
    repo, base = await new_repo(tmp_path)
    folder = await repo.private_copy(base, tmp_path / "apply" / "system")
    plant(folder)
    with pytest.raises(SystemRepoError, match=refusal):
        await repo.commit_folder(folder, base, "apply")
    assert run(f"--git-dir={repo.repo}", "rev-list", "--all") == base


# failing, missing and hanging git -----------------------------------------------------------------


async def test_a_commit_the_repository_refuses_is_an_error_never_no_change(tmp_path: Path) -> None:
    """When the repository cannot take the new objects, commit_folder raises naming the folder and why: an
    edit is never taken for none, and the version it was made from is still readable."""
    repo, base = await new_repo(tmp_path)
    folder = await repo.private_copy(base, tmp_path / "apply" / "system")
    (folder / "AGENTS.md").write_text("Edited.\n")
    refuse_new_objects(repo.repo)
    with pytest.raises(SystemRepoError, match=rf"folder {folder} cannot be recorded: .*objects/"):
        await repo.commit_folder(folder, base, "apply")
    assert tree_of(repo, base)["AGENTS.md"] == "100644 Be careful."


async def test_a_missing_git_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without git on PATH, a repository call raises SystemRepoError saying so (not FileNotFoundError)."""
    repo, _ = await new_repo(tmp_path)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))

    with pytest.raises(SystemRepoError, match=r"^git is not installed or not on PATH: cannot run git "):
        await repo.head()


SLEEPS = """sleep 60 &
echo $! > "$(dirname "$0")/sleep.pid"
wait
"""


async def test_a_git_past_its_timeout_is_killed_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git that does not answer within timeout_s is ended, children too, and raises naming the seconds."""
    bin_dir = fake_git(tmp_path / "bin", SLEEPS)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    repo = SystemRepo(tmp_path / "system.git", tmp_path / "snapshots", git_timeout_s=0.5)

    began = time.monotonic()
    with pytest.raises(SystemRepoError, match=r"rev-parse .*: no answer within 0\.5 s: killed"):
        await repo.head()

    assert time.monotonic() - began < 5.0
    assert wait_gone(int((bin_dir / "sleep.pid").read_text()))
    with pytest.raises(SystemRepoError, match=r"no answer within 0\.25 s"):
        await git("version", timeout_s=0.25)


async def test_update_main_moves_forward_only_and_fails_on_a_bad_version(tmp_path: Path) -> None:
    """main follows a publish by compare-and-set, ignores a stale caller, and a bad version raises; a
    version that descends from main moves it whatever base its caller names."""
    repo, base = await new_repo(tmp_path)
    versions = []
    for text in ("one", "two"):
        folder = await repo.private_copy(base, tmp_path / text / "system")
        (folder / "AGENTS.md").write_text(f"{text}\n")
        version = await repo.commit_folder(folder, base, text)
        assert version is not None
        versions.append(version)
    first, sibling = versions

    await repo.update_main(first, base=base)
    assert await repo.head() == first
    await repo.update_main(sibling, base=base)  # made from base, published after main moved on: no-op
    assert await repo.head() == first
    await repo.update_main(base)  # older than main: no-op
    assert await repo.head() == first
    with pytest.raises(SystemRepoError):
        await repo.update_main("0" * 40, base=base)
    assert await repo.head() == first
    folder = await repo.private_copy(first, tmp_path / "three" / "system")
    (folder / "AGENTS.md").write_text("three\n")
    third = await repo.commit_folder(folder, first, "three")
    assert third is not None
    await repo.update_main(third, base=base)  # its base is stale, but it descends from main: it moves
    assert await repo.head() == third


# the mirror ---------------------------------------------------------------------------------------


def tuning_file(tmp_path: Path, remote: str) -> Path:
    write_system(tmp_path / "system")
    (tmp_path / "cases").mkdir()
    file = tmp_path / "tuning.yaml"
    file.write_text(f"name: t1\nsystem: system\ncases: cases\nremote: {remote}\nremote_branch: tuned\n")
    return file


@pytest.fixture
async def client(settings: FleetSettings) -> AsyncIterator[TunefleetClient]:
    async with TunefleetClient(settings.model_copy(update={"mirror_timeout_s": 1.0})) as c:
        yield c


async def test_a_hung_remote_fails_in_time_is_shown_and_recovers(
    tmp_path: Path, client: TunefleetClient
) -> None:
    """A push that hangs is ended at mirror_timeout_s and recorded as failing (status shows it); once the
    remote answers again, the next round pushes the current version and clears the error."""
    remote = bare_remote(tmp_path / "remote.git", HANGING_HOOK)
    await client.register(tuning_file(tmp_path, str(remote)))
    version = (await client.redis.get("tf:version:t1")).decode()
    mirror = Mirror(client.redis, client.store, client.settings)

    began = time.monotonic()
    with structlog.testing.capture_logs() as logged:
        states = await mirror.push_all()
    assert time.monotonic() - began < 5.0
    assert wait_gone(int((remote / "hooks" / "hook.pid").read_text()))  # the hook went with the push
    failing = states["t1"]
    assert failing.error is not None and "no answer within 1 s: killed" in failing.error
    assert (failing.version, failing.attempts, failing.branch) == (None, 1, "tuned")
    [event] = [e for e in logged if e["event"] == "mirror_failed"]
    assert (event["tuning"], event["version"], event["attempts"]) == ("t1", version, 1)

    again = (await mirror.push_all())["t1"]
    assert (again.attempts, again.failing_since) == (2, failing.failing_since)
    status = (await fleet_status(client.redis, client.settings.queue)).tunings[0]
    assert status.mirror == again
    console = Console(record=True, width=300)
    console.print(status_table(await client.status()))
    assert f"mirror t1 → {remote} tuned: failing since" in console.export_text()

    (remote / "hooks" / "pre-receive").unlink()
    with structlog.testing.capture_logs() as logged:
        pushed = (await mirror.push_all())["t1"]
    assert (pushed.version, pushed.error, pushed.failing_since, pushed.attempts) == (version, None, None, 0)
    assert run(f"--git-dir={remote}", "rev-parse", "refs/heads/tuned") == version
    assert [e["event"] for e in logged] == ["mirror_pushed"]
    status = (await fleet_status(client.redis, client.settings.queue)).tunings[0]
    assert status.mirror is not None and status.mirror.error is None
    with structlog.testing.capture_logs() as logged:
        assert (await mirror.push_all())["t1"] == pushed  # already there: no push
    assert logged == []


async def test_a_mirror_error_never_shows_the_remotes_credentials(
    tmp_path: Path, client: TunefleetClient
) -> None:
    """The user and password of a remote URL are masked in the recorded state, its error and the log."""
    url = "https://someone:s3cret-token@127.0.0.1:1/system.git"
    await client.register(tuning_file(tmp_path, url))
    with structlog.testing.capture_logs() as logged:
        state = (await Mirror(client.redis, client.store, client.settings).push_all())["t1"]
    assert state.error is not None and state.remote == "https://***@127.0.0.1:1/system.git"
    stored = await client.redis.hgetall("tf:mirror:t1")  # type: ignore[misc]
    assert b"s3cret" not in b"".join(stored.values())
    assert "s3cret" not in repr(logged)


async def test_the_daemon_owns_the_mirror_and_cancels_a_hung_push_on_stop(
    tmp_path: Path, settings: FleetSettings
) -> None:
    """The daemon pushes promptly after start, and on stop ends a push under way instead of waiting for it."""
    remote = bare_remote(tmp_path / "remote.git", HANGING_HOOK)
    patient = settings.model_copy(update={"mirror_timeout_s": 60.0, "mirror_retry_s": 60.0})
    async with TunefleetClient(patient) as client:
        daemon = Daemon(client)
        await daemon.start([tuning_file(tmp_path, str(remote))])
        running = asyncio.create_task(daemon.run())
        pid_file = remote / "hooks" / "hook.pid"
        async with asyncio.timeout(10):
            while not pid_file.exists() or not pid_file.read_text().strip():
                await asyncio.sleep(0.05)
        began = time.monotonic()
        daemon.stopping.set()
        async with asyncio.timeout(10):
            await running
    assert time.monotonic() - began < 5.0
    assert wait_gone(int(pid_file.read_text()), within_s=15.0)  # killed at once; a loaded machine reaps late
