"""Where an echo job keeps its files: `<store>/echo/<tuning>/<echo>/`."""

from __future__ import annotations

from pathlib import Path

from service.core.io.files import read_model, write_model
from service.core.store import Store
from tests.kinds.echo.service.models import EchoResult, EchoSpec, StepDone


class EchoStore:
    """One echo job's folder."""

    def __init__(self, store: Store, tuning: str, echo: str) -> None:
        self.root = store.root / "echo" / tuning / echo

    @staticmethod
    def every(store: Store, tuning: str | None = None) -> list[EchoStore]:
        """Every echo job the store holds (of one tuning, if named)."""
        base = store.root / "echo"
        tunings = [base / tuning] if tuning is not None else sorted(base.iterdir()) if base.is_dir() else []
        return [EchoStore(store, t.name, e.name) for t in tunings if t.is_dir() for e in sorted(t.iterdir())]

    def create(self, spec: EchoSpec) -> None:
        write_model(self.root / "spec.json", spec)

    def spec(self) -> EchoSpec:
        found = read_model(self.root / "spec.json", EchoSpec)
        if found is None:
            raise FileNotFoundError(f"{self.root}: no spec.json")
        return found

    def step_path(self, step: int) -> Path:
        return self.root / f"step-{step}.json"

    def step(self, step: int) -> StepDone | None:
        return read_model(self.step_path(step), StepDone)

    def release_path(self, step: int) -> Path:
        """The file whose presence lets step `step` finish (the test makes it)."""
        return self.root / f"release-{step}"

    @property
    def result_path(self) -> Path:
        return self.root / "result.json"

    def result(self) -> EchoResult | None:
        return read_model(self.result_path, EchoResult)
