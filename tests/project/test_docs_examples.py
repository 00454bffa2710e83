"""The docs' runnable examples run as written, as the README's quick start does.

A Python block marked ``<!-- runnable -->`` on the line before it is executed on its own, in a
fresh working directory, with a newcomer's environment (no ``CLOUDQUEUE_*`` variables): what a
reader pastes into a file and runs must work and its assertions hold. So is the section of a
Python file a page includes (``--8<-- "path.py:section"``): a reader copies it as well.

Every other Python block says why it cannot run on its own, on the line before it:
``<!-- fragment: a method of the worker above -->``. A block with neither marker fails the suite,
so a new sample is run or is a fragment on purpose, never by omission.
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
FRAGMENT = re.compile(r"<!-- fragment: \S.* -->")
"""The marker of a block that cannot run alone, with the reason."""
PYTHON_FENCE = re.compile(r"^[ \t]*```python[ \t]*$", re.MULTILINE)
INCLUDED = re.compile(r'^--8<-- "(?P<path>[^":]+\.py):(?P<section>[a-z_-]+)"$', re.MULTILINE)


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def runnable_examples(docs: Path = DOCS) -> list[Example]:
    """Every marked block and every included Python section of every page, with where it is."""
    found = []
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in RUNNABLE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Example(str(page.relative_to(docs)), line, match["code"]))
        for match in INCLUDED.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            code = included_section(REPO_ROOT / match["path"], match["section"])
            found.append(Example(str(page.relative_to(docs)), line, code))
    return found


def included_section(source: Path, section: str) -> str:
    """The lines between ``# --8<-- [start:SECTION]`` and ``[end:SECTION]``, as the page shows."""
    text = source.read_text(encoding="utf-8")
    start = text.index(f"# --8<-- [start:{section}]\n")
    end = text.index(f"# --8<-- [end:{section}]", start)
    return text[text.index("\n", start) + 1 : end]


def unmarked_blocks(docs: Path = DOCS) -> list[str]:
    """``page:line`` of each Python block marked neither runnable nor fragment (with a reason)."""
    unmarked = []
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for fence in PYTHON_FENCE.finditer(text):
            before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
            if before != "<!-- runnable -->" and not FRAGMENT.fullmatch(before):
                unmarked.append(
                    f"{page.relative_to(docs)}:{text.count(chr(10), 0, fence.start()) + 1}"
                )
    return unmarked


def test_every_python_block_runs_or_says_why_it_cannot() -> None:
    """No sample is left unrun by omission: each is runnable, or a fragment with its reason."""
    assert unmarked_blocks() == []


def test_a_block_without_a_marker_or_with_an_empty_reason_is_reported(tmp_path: Path) -> None:
    """The check above can fail: a bare block and a reasonless fragment are both named."""
    (tmp_path / "page.md").write_text(
        "```python\nx = 1\n```\n\n<!-- fragment: -->\n```python\ny\n```\n\n"
        "<!-- fragment: needs y -->\n```python\ny\n```\n"
    )
    assert unmarked_blocks(tmp_path) == ["page.md:1", "page.md:6"]


def test_the_marker_finds_the_producing_examples() -> None:
    """The producing page's examples are marked, so the runner below has them to run."""
    pages = {example.page for example in runnable_examples()}
    assert "how-to/producing.md" in pages
    assert "getting-started/workers.md" in pages
    assert "getting-started/testing.md" in pages  # its included test module


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
