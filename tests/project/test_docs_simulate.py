"""The docs' simulator tables are the command's output, not typed-in numbers."""

from __future__ import annotations

from click.testing import CliRunner

from cloudqueue.workers.cli import cli
from tests.support.paths import REPO_ROOT

SCALING_PAGE = REPO_ROOT / "docs" / "concepts" / "scaling.md"


def quoted_output(command: str) -> str:
    """The lines the scaling page shows after ``$ <command>`` inside its code block."""
    text = SCALING_PAGE.read_text(encoding="utf-8")
    start = text.index(f"$ {command}\n") + len(command) + 3
    return text[start : text.index("```", start)].rstrip("\n")


def test_the_docs_quote_the_design_table_as_the_command_prints_it() -> None:
    """`cloudqueue simulate --preset design-table` prints exactly what the docs show."""
    result = CliRunner().invoke(cli, ["simulate", "--preset", "design-table"])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip("\n") == quoted_output("cloudqueue simulate --preset design-table")
