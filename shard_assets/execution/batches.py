"""What a build asks an executor to run: batches (a job over adjacent partitions), their outcomes, and the
executor protocol the in-process pool (runner.LocalRuns) and the instance's queue (run_queue.RunQueue) implement."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class RunBatch:
    """One run to execute: a job over adjacent partitions (none for an unpartitioned job), optionally some of its
    assets."""

    job: str
    partitions: tuple[str, ...] = ()
    assets: tuple[str, ...] = ()

    def __str__(self) -> str:
        p = self.partitions
        return f"{self.job} [{p[0]}{f'..{p[-1]}' if len(p) > 1 else ''}]" if p else self.job


@dataclass(frozen=True)
class RunOutcome:
    """What became of a batch: the runs made for it, and each failed partition (the job for an unpartitioned
    run) with a one-line message naming the job, partitions, run and innermost error."""

    batch: RunBatch
    run_ids: tuple[str, ...]
    failures: dict[str, str]


class RunExecutor(Protocol):
    """How a build's runs are executed; yields each batch's outcome as it completes."""

    def execute(self, batches: Sequence[RunBatch]) -> Iterator[RunOutcome]: ...
