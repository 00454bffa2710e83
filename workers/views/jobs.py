"""The periodic jobs of ``cloudqueue status``: each job's last and next firing.

It comes from the live-state files of the running processes (no storage transaction). Every
process that runs a job shows the last tick fired anywhere as it last saw the ledger, so the
latest of them is the job's last firing; all compute the same next tick.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cloudqueue.workers.host.live_state import read_job_states


@dataclass(slots=True)
class JobRow:
    """One job over the running processes that host it."""

    job: str
    schedule: str
    last_fired: str | None = None
    next_firing: str | None = None
    processes: list[str] = field(default_factory=list)
    running_in: list[str] = field(default_factory=list)
    runs: Counter[str] = field(default_factory=Counter)

    def report(self) -> dict[str, object]:
        return {
            "job": self.job,
            "schedule": self.schedule,
            "last_fired": self.last_fired,
            "next_firing": self.next_firing,
            "processes": self.processes,
            "running_in": self.running_in,
            "runs": dict(self.runs),
        }


def job_rows(state_dir: Path, where: str) -> list[JobRow]:
    """A row per job that a running process on storage ``where`` hosts, sorted by name."""
    rows: dict[str, JobRow] = {}
    for state, job in read_job_states(state_dir, storage=where):
        row = rows.setdefault(job.job, JobRow(job.job, job.schedule))
        process = f"{state.host}-{state.pid}"
        row.processes.append(process)
        if job.running:
            row.running_in.append(process)
        row.runs.update(job.runs)
        row.last_fired = _latest(row.last_fired, job.last_fired)
        row.next_firing = job.next_firing if row.next_firing is None else row.next_firing
    return [rows[name] for name in sorted(rows)]


def _latest(one: str | None, other: str | None) -> str | None:
    # ISO 8601 times in UTC with one offset compare as text.
    return max((t for t in (one, other) if t is not None), default=None)
