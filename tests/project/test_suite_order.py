"""The suite's own scheduling: how many workers `-n auto` starts, and the files it runs first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import HEAVY_FIRST, pytest_xdist_auto_num_workers

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_every_file_run_first_exists() -> None:
    """A renamed heavy test file would silently fall back into collection order."""
    assert [name for name in HEAVY_FIRST if not (REPO_ROOT / name).is_file()] == []


def test_auto_starts_one_worker_more_than_the_cores(pytestconfig: pytest.Config) -> None:
    """The suite waits on subprocesses and emulators much of the time: a spare worker fills it."""
    cores = len(os.sched_getaffinity(0))
    assert pytest_xdist_auto_num_workers(pytestconfig) == cores + 1
