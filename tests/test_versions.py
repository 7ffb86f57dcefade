"""A tuning's history on every front end (issue 52): `tunefleet versions`, `diff` and `why` over the CLI,
the HTTP API and the client, on a real fleet whose gate published one edit and rejected others; and every
version name is resolved against the tuning's own versions before git sees it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from service.api.app import create_app
from service.core.store import Store
from service.kinds.evals.fleet import EvalFiles
from service.kinds.evals.history.models import VersionDiff, VersionList, VersionWhy
from service.kinds.evals.history.names import UnknownVersionError
from service.kinds.evals.history.tokens import count_tokens
from service.kinds.evals.stats import Rate
from tests.support.cli import fleet_env, tunefleet
from tests.support.fleet import Fleet, case, demo_adapter, wait_until, write_tuning

ADAPTER = demo_adapter(run_ms=100, analyze_ms=10, apply_ms=10)
KEEPERS = [case("keep-1", forbids=["risky"]), case("keep-2", forbids=["risky"])]
HOSTILE = ["-p", "--output=/tmp/x", "main..initial", "HEAD~1", "../../etc/passwd", "refs/heads/main", "zz"]


def cli(fleet: Fleet, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """`tunefleet ARGS` against the test's fleet."""
    done = tunefleet(*args, env=fleet_env(fleet.settings, COLUMNS="200"))
    assert (done.returncode == 0) is ok, done.stderr
    return done


@pytest.fixture
async def tuned(fleet: Fleet, tmp_path: Path) -> Fleet:
    """Tuning t1 under a gate: keep-1, keep-2 and `adds` pass (adds through one published apply), then
    `fixer`'s two applies add a rule that breaks the keepers and are rejected; then an evaluation of
    main. A second tuning, t2, is registered beside it."""
    fleet.start_worker(concurrency=4)
    root = tmp_path / "t"
    gate = {"cases": "passed", "sample": 10, "rule": "strict"}
    tuning = write_tuning(root, [*KEEPERS, case("adds", rules=["greet"])], adapter=ADAPTER, gate=gate)
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(3, timeout_s=60)
    fixer = case("fixer", rules=["risky"])
    (root / "cases" / "fixer.yaml").write_text(yaml.safe_dump(fixer))
    await fleet.start_tuning(tuning)
    await fleet.wait_finished(4, timeout_s=90)
    await fleet.start_tuning(write_tuning(tmp_path / "other", [case("solo", rules=["own"])], name="t2"))
    await fleet.wait_finished(1, tuning="t2", timeout_s=60)
    async with fleet.client() as client:
        spec = await client.evals.create("t1", version="main", name="after")
        await wait_until(lambda: _done(fleet, spec.id), 60, "the evaluation of main to end")
    return fleet


def _done(fleet: Fleet, eval_id: str) -> bool:
    results = EvalFiles(Store(fleet.settings.store)).results(eval_id)
    return results.done == results.items


async def test_versions_lists_every_version_and_rejected_candidate_with_its_figures(tuned: Fleet) -> None:
    """`tunefleet versions t1 --format json` lists the import, the published edit of `adds` and fixer's
    two rejected candidates, each with its case and try, summary, lines, size, gate verdict and figures,
    and the evaluation of main with its interval; the table and TSV show the same rows."""
    found = VersionList.model_validate_json(cli(tuned, "versions", "t1", "--format", "json").stdout)
    by_status = {
        s: [r for r in found.versions if r.status == s] for s in ("initial", "published", "rejected")
    }
    assert len(by_status["initial"]) == 1 and by_status["initial"][0].origin is None
    assert [r.origin.case for r in by_status["published"] if r.origin] == ["adds"]
    assert sorted((r.origin.case, r.origin.attempt) for r in by_status["rejected"] if r.origin) == [
        ("fixer", 1),
        ("fixer", 2),
    ]
    published, rejected = by_status["published"][0], by_status["rejected"][0]
    assert published.current and published.id == found.current
    assert published.summary and published.added >= 1 and published.removed == 0
    assert published.tokens > by_status["initial"][0].tokens > 0
    assert published.gate is not None and published.gate.verdict == "passed"
    assert rejected.gate is not None and rejected.gate.verdict == "rejected" and rejected.gate.by == "gate"
    assert rejected.gate.broken == ["keep-1", "keep-2"] and rejected.gate.items == 3
    assert rejected.gate.baseline_rate == 1.0 and rejected.gate.candidate_rate == pytest.approx(1 / 3)
    assert [e.purpose for e in rejected.evals] == ["gate"] and rejected.evals[0].rate.passed == 1
    assert [e.eval for e in published.evals if e.purpose == "user"] == ["after"]
    rate = next(e.rate for e in published.evals if e.purpose == "user")
    assert isinstance(rate, Rate) and rate.graded == 4 and rate.low <= rate.rate <= rate.high
    tsv = cli(tuned, "versions", "t1", "--format", "tsv").stdout.splitlines()
    assert tsv[0].split("\t")[:3] == ["id", "status", "current"] and len(tsv) == 1 + len(found.versions)
    table = cli(tuned, "versions", "t1").stdout
    assert published.id[:12] in table and "rejected" in table and "fixer" in table


async def test_diff_and_why_explain_a_version(tuned: Fleet) -> None:
    """`tunefleet diff t1 initial main` shows the published rule as an added line; `why` on a rejected
    candidate gives the feedback whose improvement was applied, the analysis and the gate's items."""
    found = VersionList.model_validate_json(cli(tuned, "versions", "t1", "--format", "json").stdout)
    patch = cli(tuned, "diff", "t1", "initial", "main").stdout
    assert "rules/greet.md" in patch and any(line.startswith("+") for line in patch.splitlines()[1:])
    assert "\x1b[" not in patch  # no colour when not on a terminal
    as_json = VersionDiff.model_validate_json(cli(tuned, "diff", "t1", "initial", "main", "--json").stdout)
    assert as_json.b_id == found.current and as_json.added >= 1
    rejected = next(r for r in found.versions if r.status == "rejected")
    why = VersionWhy.model_validate_json(cli(tuned, "why", "t1", rejected.id[:10], "--format", "json").stdout)
    assert why.feedback is not None and why.feedback.improvements
    assert why.gate is not None and {i.case for i in why.gate.items} == {"adds", "keep-1", "keep-2"}
    shown = cli(tuned, "why", "t1", rejected.id[:10]).stdout
    assert "fixer" in shown and "rejected" in shown


async def test_the_same_history_over_http_and_the_client(tuned: Fleet) -> None:
    """GET .../versions, .../diff/initial/main and .../versions/{v}/why answer the typed models the CLI
    prints; the client's `versions` gives the same list."""
    async with tuned.client() as client:
        listed = await client.versions.list("t1")
        app = create_app(client, tuned.settings.model_copy(update={"api_public_read": True}))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://tunefleet") as api:
            answer = await api.get("/api/tunings/t1/versions")
            assert VersionList.model_validate_json(answer.content) == listed
            diff = VersionDiff.model_validate_json(
                (await api.get("/api/tunings/t1/diff/initial/main")).content
            )
            assert "rules/greet.md" in diff.patch
            why = await api.get(f"/api/tunings/t1/versions/{listed.current[:8]}/why")
            assert VersionWhy.model_validate_json(why.content).version.id == listed.current
            missing = await api.get("/api/tunings/nope/versions")
            assert missing.status_code == 404


async def test_a_hostile_or_foreign_version_name_is_refused_everywhere(tuned: Fleet) -> None:
    """A name that begins with `-`, holds `..` or a path, is a git revision expression, or names another
    tuning's commit is refused in one line by `diff` and `why` on the CLI (given after `--`, as a name
    that begins with `-` must be), with a 404 over HTTP, and by the client."""
    other = VersionList.model_validate_json(cli(tuned, "versions", "t2", "--format", "json").stdout)
    foreign = other.current
    for name in ["-p", "main..initial", "../../etc/passwd", "HEAD~1", foreign[:12]]:
        for args in (("diff", "t1", "--", "initial", name), ("why", "t1", "--", name)):
            done = cli(tuned, *args, ok=False)
            assert done.returncode == 2 and done.stdout == ""
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: tuning t1: version"), (args, done.stderr)
    async with tuned.client() as client:
        app = create_app(client, tuned.settings.model_copy(update={"api_public_read": True}))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://tunefleet") as api:
            for name in [*HOSTILE, "..", foreign, foreign[:12]]:
                for path in (f"diff/initial/{name}", f"diff/{name}/main", f"versions/{name}/why"):
                    answer = await api.get(f"/api/tunings/t1/{path}")
                    assert answer.status_code == 404, (path, answer.text)
            for name in [*HOSTILE, foreign]:
                with pytest.raises(UnknownVersionError, match=r"^tuning t1: version"):
                    await client.versions.diff("t1", name, "main")


def test_sizes_are_counted_by_the_real_tokenizer_offline() -> None:
    """Sizes are cl100k_base tokens from the table shipped in the wheel (no network): a long word is few
    tokens, a special token's text is plain text, and the counts are tiktoken's own."""
    assert count_tokens("") == 0
    assert count_tokens("Be brief.") == 3
    assert count_tokens("internationalisation") == 2
    assert count_tokens("# Rules\n\n- rule: base\n") == 8
    assert count_tokens("<|endoftext|>") == 7


async def test_the_report_says_what_changed_version_by_version(tuned: Fleet) -> None:
    """`tunefleet report t1` has a section with the diff from the import to the final version, the
    published edit tied to its case and try and its gate's verdict, and fixer's rejected candidates after
    it with the gate's reasons."""
    found = VersionList.model_validate_json(cli(tuned, "versions", "t1", "--format", "json").stdout)
    report = cli(tuned, "report", "t1").stdout
    section = report.split("## What changed", 1)[1]
    published = next(r for r in found.versions if r.status == "published")
    assert f"### `{published.id[:12]}` from adds r1 nomem/1" in section
    assert "- gate passed:" in section and "```diff" in section and "+++ b/rules/greet.md" in section
    rejected = section.split("### Rejected candidates", 1)[1]
    assert rejected.count("| fixer r1 nomem/") == 2 and "| gate | broke keep-1, keep-2" in rejected
    as_json = json.loads(cli(tuned, "report", "t1", "--json").stdout)
    assert as_json["changes"]["final"] == found.current and len(as_json["changes"]["rejected"]) == 2
