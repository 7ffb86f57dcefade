"""The `openai` SDK costs a worker about half a second of CPU to import: it is loaded with the first LLM
adapter a worker builds (workers/adapters/factory.py), never by a worker whose tunings use no model, and
in a thread, so that the jobs already running keep renewing their leases meanwhile."""

from __future__ import annotations

import subprocess
import sys

from tests.support.fleet import demo_adapter

CHECK = """
import sys
from service.core.models.tuning import DemoAdapter, LlmAdapter
from workers.adapters.factory import build_analyzer
from workers.adapters.process import AgentHost
import workers.__main__
host = AgentHost()
build_analyzer(DemoAdapter.model_validate({demo}), host)
print("openai" in sys.modules)
build_analyzer(LlmAdapter(kind="llm", base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None), host)
print("openai" in sys.modules)
"""


def test_a_worker_loads_the_sdk_with_its_first_llm_adapter_only() -> None:
    """A worker's modules and a demo adapter leave the SDK unloaded; building an LLM adapter loads it."""
    script = CHECK.format(demo=demo_adapter(0, 0, 0))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


OFF_LOOP = """
import asyncio, sys, threading
first_import_on_main = []

def hook(event, args):
    if event == "import" and args[0] == "openai" and not first_import_on_main:
        first_import_on_main.append(threading.current_thread() is threading.main_thread())

sys.addaudithook(hook)
from workers.adapters.factory import llm_modules_loaded

async def main():
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    ticking = asyncio.ensure_future(tick())
    await asyncio.sleep(0)
    await llm_modules_loaded()
    ticking.cancel()
    return ticks

ticks = asyncio.run(main())
print(first_import_on_main, ticks >= 10)
"""


def test_a_job_that_needs_the_sdk_has_it_imported_off_the_event_loop() -> None:
    """`llm_modules_loaded` imports the SDK in a thread while the loop turns on (a heartbeat would too):
    imported on the loop, it would hold every other job's lease renewal for its whole import."""
    done = subprocess.run([sys.executable, "-c", OFF_LOOP], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[False]", "True"]


WARM = """
import asyncio, sys, threading
from service.core.models.tuning import LlmAdapter
from workers.adapters.factory import llm_modules_loaded
from workers.adapters.llm.pool import Providers
from tests.support.fake_openai import FakeOpenAI, Reply

on_loop = []
watching = False

def hook(event, args):
    if event == "import" and watching and threading.current_thread() is threading.main_thread():
        on_loop.append(args[0])

sys.addaudithook(hook)

async def main(url, warm):
    global watching
    pool = Providers()
    config = LlmAdapter(kind="llm", base_url=url, model="m", api_key_env=None)
    await llm_modules_loaded((lambda: pool.warm([config])) if warm else None)
    watching = True
    sdk, _ = pool.get(config).client(config)
    await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    watching = False
    await pool.aclose()

with FakeOpenAI(responder=lambda body: Reply("{}", 10, 2)) as server:
    asyncio.run(main(server.base_url, sys.argv[1] == "warm"))
print(len(on_loop), "openai.resources.chat" in on_loop)
"""


def test_a_jobs_prepare_warms_its_clients_so_that_the_first_call_imports_nothing_on_the_loop() -> None:
    """What a client's first call would import on the event loop (the SDK's chat resources, its HTTP
    transport (aiohttp): about a tenth of a second, every other job held up meanwhile) is
    imported by the prepare's thread with the job's clients (`Providers.warm`): the first call then
    imports nothing on the loop. Without the warm-up it imports those modules there."""
    runs: dict[str, list[str]] = {}
    for mode in ("warm", "cold"):
        done = subprocess.run([sys.executable, "-c", WARM, mode], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        runs[mode] = done.stdout.split()
    assert runs["warm"] == ["0", "False"]
    assert int(runs["cold"][0]) > 0 and runs["cold"][1] == "True", runs["cold"]
