"""The progress channel, recorded: every step a run announces, in order."""

from __future__ import annotations

from export_gelu.progress import Progress


class StepLog(Progress):
    """A Progress that keeps what each step said."""

    def __init__(self) -> None:
        super().__init__(enabled=False)
        self.steps: list[str] = []

    def step(self, message: str) -> None:
        self.steps.append(message)

    def loads(self) -> int:
        return sum(s.startswith("loading ") for s in self.steps)
