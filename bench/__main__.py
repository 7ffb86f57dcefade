"""`python -m bench [names...]`: run the benchmarks (all, or those named) and print one table.

Each benchmark starts its own redis-server on a free port and its own worker processes, and compares
its figures with a baseline measured in the same run. The table is also written to
var/bench/latest.json and var/bench/latest.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import signal
import sys
import time
import traceback
from pathlib import Path

from bench.common import ROOT, Figure, empty_trash
from service.core import logs

BENCHMARKS = [
    "overhead",
    "slots",
    "applies",
    "coordination",
    "queue_scale",
    "dispatch",
    "recovery",
    "memory",
    "llm",
    "autoscale",
    "evals",
    "gates",
    "agent_start",
    "big_system",
    "commits",
    "reconcile",
    "landing",
    "quality",
    "guards",
    "soak",
]


def _num(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if magnitude >= 0.1 else f"{value:.3f}"


def _met(figure: Figure) -> str:
    return {True: "yes", False: "NO", None: "-"}[figure.met]


def rows(figures: list[Figure]) -> list[list[str]]:
    return [
        [
            f.bench,
            f.name,
            f"{_num(f.value)} {f.unit}".strip(),
            f"{_num(f.baseline)} {f.unit}".strip() if f.baseline is not None else "-",
            _num(f.ratio),
            f.target or "-",
            _met(f),
        ]
        for f in figures
    ]


HEADER = ["bench", "figure", "value", "baseline", "ratio", "target", "met"]


def text_table(figures: list[Figure]) -> str:
    table = [HEADER, *rows(figures)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _baseline(figure: Figure) -> str:
    return f"baseline = {figure.baseline_label}. " if figure.baseline_label else ""


def markdown_table(figures: list[Figure]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(figures)]
    notes = [f"- **{f.bench} / {f.name}**: {_baseline(f)}{f.note}" for f in figures]
    return "\n".join(lines) + "\n\nNotes:\n\n" + "\n".join(notes) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    args = parser.parse_args(argv)
    logs.configure("console", "warning")
    # A stop (SIGTERM) unwinds like Ctrl-C, so that each benchmark's processes and Redis are ended.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHMARKS)}")
    figures: list[Figure] = []
    failed: list[str] = []
    began = time.monotonic()
    for name in args.names or BENCHMARKS:
        start = time.monotonic()
        print(f"== {name} ...", file=sys.stderr, flush=True)
        try:
            module = importlib.import_module(f"bench.{name}")
            got: list[Figure] = module.run()
        except Exception:
            traceback.print_exc()
            failed.append(name)
            got = [Figure(name, "(benchmark failed)", None, "", note=traceback.format_exc(limit=1))]
        figures += got
        print(f"== {name}: {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
        for figure in got:
            print(f"   {figure.name}: {_num(figure.value)} {figure.unit}  {figure.note}", file=sys.stderr)
    total = time.monotonic() - began
    out = ROOT / "var" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(
        json.dumps({"seconds": total, "figures": [f.as_dict() for f in figures]}, indent=2) + "\n"
    )
    (out / "latest.md").write_text(markdown_table(figures))
    print(text_table(figures))
    print(f"\n{len(figures)} figures in {total:.0f} s; notes in {Path('var/bench/latest.md')}")
    empty_trash()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
