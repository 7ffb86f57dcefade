"""Take docs/dashboard.png from a real demo run: a daemon and two workers run the demo tuning and the
example goals while a headless Chromium (found on PATH) opens the dashboard with a read token and
photographs it mid-run.

    scripts/with-redis.sh .venv/bin/python scripts/dashboard_screenshot.py [--store DIR] [--out FILE]

Needs `chromium` on PATH and the `playwright` Python package (no browser download).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]
MID_RUN = """(least) => {
  const number = (selector) =>
    Number((document.querySelector(selector) || {}).textContent?.replace(/,/g, "") || 0);
  return number("#in-progress") > 1 && number('#tunings tr[data-tuning="demo"] td.completed') >= least;
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_for_api(url: str, timeout_s: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "openapi.json", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the daemon's API did not answer at {url} within {timeout_s} s")


async def photograph(url: str, out: Path, least: int) -> None:
    from playwright.async_api import async_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium is not on PATH")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1440, "height": 1000})
            await page.goto(url)
            await page.wait_for_function(MID_RUN, arg=least, timeout=120_000)
            await page.screenshot(path=str(out), full_page=True)
        finally:
            await browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store", type=Path, default=ROOT / "var" / "demo-store", help="a fresh store folder"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--finished", type=int, default=15, help="cases finished before the picture")
    args = parser.parse_args()
    if "TUNEFLEET_REDIS_URL" not in os.environ:
        raise SystemExit("run it under scripts/with-redis.sh (TUNEFLEET_REDIS_URL is not set)")
    shutil.rmtree(args.store, ignore_errors=True)
    args.store.mkdir(parents=True)
    token = secrets.token_urlsafe(16)
    port = free_port()
    env = {
        **os.environ,
        "TUNEFLEET_STORE": str(args.store.resolve()),
        "TUNEFLEET_API_PORT": str(port),
        "TUNEFLEET_API_READ_TOKEN": token,
        "TUNEFLEET_LOG_FORMAT": "json",
    }
    logs = args.store / "logs"
    logs.mkdir()
    python = sys.executable
    procs = [
        start([python, "-m", "service", "daemon", "examples/demo/tuning.yaml"], env, logs / "daemon.log")
    ]
    try:
        wait_for_api(f"http://127.0.0.1:{port}/", 60)
        for spec in sorted((ROOT / "examples" / "goals").glob("*.yaml")):  # the goals table beside
            subprocess.run([python, "-m", "service", "goal", "start", str(spec)], env=env, check=True)
        procs += [start([python, "-m", "workers"], env, logs / f"worker-{n}.log") for n in range(2)]
        asyncio.run(photograph(f"http://127.0.0.1:{port}/?token={token}", args.out, args.finished))
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
