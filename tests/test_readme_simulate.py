"""The README's simulator tables are the command's output, not typed-in numbers."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from workers.cli import cli

README = Path(__file__).resolve().parents[1] / "README.md"


def quoted_output(command: str) -> str:
    """The lines the README shows after ``$ <command>`` inside its code block."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"$ {command}\n") + len(command) + 3
    return text[start : text.index("```", start)].rstrip("\n")


def test_the_readme_quotes_the_seed_table_as_the_command_prints_it() -> None:
    """`cloudqueue simulate --preset seed-table` prints exactly what the README shows."""
    result = CliRunner().invoke(cli, ["simulate", "--preset", "seed-table"])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip("\n") == quoted_output("cloudqueue simulate --preset seed-table")
