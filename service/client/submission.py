"""Reading a folder of case files, writing a batch of submitted cases into the store, and enqueueing a
batch in one round trip (the client's `submit_path` and `submit_many`, service.client.client)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from service.core.errors import CaseFileError
from service.core.io.files import model_bytes, publish_temps, write_temp
from service.core.models.case import Case
from service.core.models.records import CaseResult
from service.core.models.status import Refusal
from service.core.store import CaseStore

SUBMIT_BATCH = 500
SUBMIT_THREADS = 2
"""Threads writing a batch's temp files (on this ext4 disk 1 and 2 measured alike and 4 slower: the
kernel serializes file creation in one folder; a network store would want more)."""


def _begin(store: CaseStore, case: Case, staging: Path) -> tuple[CaseResult | None, str | None]:
    """Start writing the case's file unless that rev has it already: (the result the rev already has,
    the temp file written in `staging` for `publish_temps`). No folder is made before the file is whole."""
    name = f"case.{case.id}.r{case.rev}"
    if not os.path.isdir(store.root):  # a new case or rev: nothing of it to read
        return None, write_temp(staging, name, model_bytes(case))
    tmp = None if store.load_case() is not None else write_temp(staging, name, model_bytes(case))
    return store.result(), tmp


def _begin_all(
    items: list[tuple[CaseStore, Case]], staging: Path
) -> list[tuple[CaseResult | None, str | None]]:
    """`_begin` for each case; when one fails, the temp files of those before are removed."""
    begun: list[tuple[CaseResult | None, str | None]] = []
    try:
        for store, case in items:
            begun.append(_begin(store, case, staging))
    except BaseException:
        for _, tmp in begun:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
        raise
    return begun


async def write_cases(
    staging: Path, stores: list[CaseStore], cases: list[Case], store_root: Path
) -> list[CaseResult | None]:
    """Write the case files of a batch that are not on disk yet, durably, through temp files in
    `staging`, from SUBMIT_THREADS threads; the result each rev already has."""
    items = list(zip(stores, cases, strict=True))
    size = -(-len(items) // SUBMIT_THREADS)
    chunks = [items[i : i + size] for i in range(0, len(items), size)]
    parts = await asyncio.gather(
        *(asyncio.to_thread(_begin_all, chunk, staging) for chunk in chunks), return_exceptions=True
    )
    begun = [pair for part in parts if not isinstance(part, BaseException) for pair in part]
    failed = [part for part in parts if isinstance(part, BaseException)]
    if failed:
        for _, tmp in begun:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
        raise failed[0]
    temps = [(tmp, store.case_file) for store, (_, tmp) in zip(stores, begun, strict=True) if tmp]
    await asyncio.to_thread(publish_temps, temps, store_root)
    return [result for result, _ in begun]


def read_case_files(path: Path, limit_bytes: int) -> tuple[list[Case], list[Refusal]]:
    """The case files at `path` that load, and the refusal of each other one (too big, not a valid case)."""
    from service.kinds.cases.files import case_files, load_case  # YAML: only when submitting files

    cases: list[Case] = []
    refused: list[Refusal] = []
    for file in case_files(path):
        size = file.stat().st_size
        if size > limit_bytes:
            error = f"{file}: {size} bytes; a case file is at most {limit_bytes} bytes (case_max_bytes)"
            refused.append(Refusal(file=str(file), error=error))
            continue
        try:
            cases.append(load_case(file))
        except CaseFileError as exc:
            refused.append(Refusal(file=str(file), error=str(exc)))
    return cases, refused
