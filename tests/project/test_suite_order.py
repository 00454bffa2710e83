"""The suite's own scheduling: the files it runs first are files that exist."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import HEAVY_FIRST

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_every_file_run_first_exists() -> None:
    """A renamed heavy test file would silently fall back into collection order."""
    assert [name for name in HEAVY_FIRST if not (REPO_ROOT / name).is_file()] == []
