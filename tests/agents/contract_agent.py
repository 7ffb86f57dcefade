"""A small real agent that follows the command adapter contract, for the tests.

    contract_agent.py [--mode MODE] [--pid-file PATH] run --input F --output F [--memory D]
    contract_agent.py [--mode MODE] [--pid-file PATH] analyze --run F --feedback F --analysis F
    contract_agent.py [--mode MODE] [--pid-file PATH] apply --worktree D --output F

MODE (or the CONTRACT_AGENT_MODE environment variable):
    normal    do the step and exit 0
    hang      write the pid file, then sleep forever (signals keep their default action)
    stubborn  like hang, but ignore SIGTERM (only SIGKILL ends it)
    fork      like hang, with a child process in the same group; the pid file gets both pids
    sandbox   exit 75: the sandbox is unavailable
    oom       exit 137, as a process killed for memory reports it through a shell
    sigkill   kill itself with SIGKILL
    crash     exit 3 without writing anything
    bad-json  write a file that breaks the step's schema, and exit 0
    hoard     run as normal, and also fill the memory with HOARD_FILES files (or --hoard-files) of
              HOARD_BYTES bytes each

The pid file is written (the agent's pid, then any child's, one a line) before the mode acts;
it may be a FIFO, which lets a test wait for the agent without polling.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HANG_MODES = ("hang", "stubborn", "fork")
HOARD_FILES = 50
HOARD_BYTES = 1000


def _usage() -> dict[str, object]:
    return {"input_tokens": 70, "output_tokens": 30, "cost_usd": 0.0002}


def _write_json(path: str, data: object) -> None:
    Path(path).write_text(json.dumps(data, indent=2), encoding="utf-8")


def _hang() -> None:
    while True:
        time.sleep(0.5)


def _start(mode: str, pid_file: str | None) -> None:
    """Act on the mode's process-level behaviour (signals, children, the pid file, early exits)."""
    pids = [os.getpid()]
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "fork":
        child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.5)"])
        pids.append(child.pid)
    if pid_file:
        with open(pid_file, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{pid}\n" for pid in pids))
    print(f"agent {os.getpid()} starting in mode {mode}", flush=True)
    if mode in HANG_MODES:
        _hang()
    if mode == "sandbox":
        print("bwrap: cannot create the namespace", file=sys.stderr, flush=True)
        sys.exit(75)
    if mode == "oom":
        sys.exit(137)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "crash":
        print("agent: something broke", file=sys.stderr, flush=True)
        sys.exit(3)


def run(args: argparse.Namespace) -> None:
    task = json.loads(Path(args.input).read_text(encoding="utf-8"))
    print(f"working on case {task['case']}", flush=True)
    print("a warning on stderr", file=sys.stderr, flush=True)
    if args.memory:
        Path(args.memory, "memory.md").write_text("remember: it worked\n", encoding="utf-8")
        if args.mode == "hoard":
            hoard = Path(args.memory, "hoard")
            hoard.mkdir(exist_ok=True)
            for n in range(args.hoard_files):
                (hoard / f"{n}.txt").write_bytes(b"x" * HOARD_BYTES)
    if args.mode == "bad-json":
        Path(args.output).write_text("{not json", encoding="utf-8")
        return
    output = {"answer": f"done: {task['input']}", "turns": 2, "skills_loaded": [], "usage": _usage()}
    _write_json(args.output, output)


def analyze(args: argparse.Namespace) -> None:
    Path(args.analysis).write_text("# Analysis\n\nLooks fine.\n", encoding="utf-8")
    if args.mode == "bad-json":
        _write_json(args.feedback, {"verdict": "excellent", "done": True})
        return
    feedback = {"verdict": "pass", "done": True, "rubric": {"r1": 1.0}, "usage": _usage()}
    _write_json(args.feedback, feedback)


def apply(args: argparse.Namespace) -> None:
    Path(args.worktree, "rules.md").write_text("- rule: be-brief\n", encoding="utf-8")
    if args.mode == "bad-json":
        _write_json(args.output, {"skills": "not-a-list"})
        return
    _write_json(args.output, {"skills": [], "summary": "added a rule", "usage": _usage()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--mode", default=os.environ.get("CONTRACT_AGENT_MODE", "normal"))
    parser.add_argument("--pid-file")
    steps = parser.add_subparsers(dest="step", required=True)
    run_parser = steps.add_parser("run")
    run_parser.add_argument("--input", required=True)
    run_parser.add_argument("--output", required=True)
    run_parser.add_argument("--memory")
    run_parser.add_argument("--hoard-files", type=int, default=HOARD_FILES)
    analyze_parser = steps.add_parser("analyze")
    analyze_parser.add_argument("--run", required=True)
    analyze_parser.add_argument("--feedback", required=True)
    analyze_parser.add_argument("--analysis", required=True)
    apply_parser = steps.add_parser("apply")
    apply_parser.add_argument("--worktree", required=True)
    apply_parser.add_argument("--output", required=True)
    args = parser.parse_args()
    _start(args.mode, args.pid_file)
    {"run": run, "analyze": analyze, "apply": apply}[args.step](args)


if __name__ == "__main__":
    main()
