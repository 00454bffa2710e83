"""The code base stays lint-clean and type-checks strictly (part of the test command on purpose)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_ruff_finds_nothing() -> None:
    """ruff check and ruff format --check pass on the whole tree."""
    lint = run_tool("ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    formatting = run_tool("ruff", "format", "--check", ".")
    assert formatting.returncode == 0, formatting.stdout + formatting.stderr


def test_mypy_strict_finds_nothing() -> None:
    """mypy --strict passes on the package as it installs, and on tests, examples, docs code."""
    result = run_tool("tests.support.typecheck")
    assert result.returncode == 0, result.stdout + result.stderr
