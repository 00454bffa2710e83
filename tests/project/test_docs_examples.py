"""The docs' runnable examples run as written, as the README's quick start does.

A Python block marked ``<!-- runnable -->`` on the line before it is executed on its own, in a
fresh working directory, with a newcomer's environment (no ``CLOUDQUEUE_*`` variables): what a
reader pastes into a file and runs must work and its assertions hold.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.project.test_readme import newcomer_environment
from tests.support.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
RUNNABLE = re.compile(r"<!-- runnable -->\n```python\n(?P<code>.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def runnable_examples(docs: Path = DOCS) -> list[Example]:
    """Every marked block of every page, with where it starts."""
    found = []
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in RUNNABLE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Example(str(page.relative_to(docs)), line, match["code"]))
    return found


def test_the_marker_finds_the_producing_examples() -> None:
    """The producing page's examples are marked, so the runner below has them to run."""
    pages = {example.page for example in runnable_examples()}
    assert "how-to/producing.md" in pages
    assert "getting-started/workers.md" in pages


def test_a_failing_example_fails(tmp_path: Path) -> None:
    """An example whose assertion does not hold is reported as failed by the runner."""
    (tmp_path / "page.md").write_text("<!-- runnable -->\n```python\nassert 1 == 2\n```\n")
    (example,) = runnable_examples(tmp_path)
    assert run(example, tmp_path).returncode != 0


@pytest.mark.parametrize("example", runnable_examples(), ids=str)
def test_the_example_runs_as_written(example: Example, tmp_path: Path) -> None:
    """The block runs to its end, its assertions holding."""
    result = run(example, tmp_path)
    assert result.returncode == 0, f"{example}\n{result.stdout[-2000:]}{result.stderr[-3000:]}"


def run(example: Example, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / "example.py"
    script.write_text(example.code)
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env=newcomer_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
