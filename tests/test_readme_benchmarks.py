"""The README's benchmark figures are generated from the committed results, never typed by hand."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks.render_readme import README, block_names, rendered, stale_blocks


def test_readme_benchmark_blocks_match_the_committed_results() -> None:
    """Every bench block in the README is what its results JSON renders to (run render_readme)."""
    assert block_names(README.read_text()), "the README has no generated benchmark block"
    assert stale_blocks() == []


def test_a_hand_edited_block_is_reported_stale(tmp_path: Path) -> None:
    """A block whose text differs from its results is named by the check, and rendering fixes it."""
    readme = tmp_path / "README.md"
    readme.write_text(
        "# x\n<!-- bench:bench_drain -->\n| 4 | 999 msg/s |\n<!-- /bench:bench_drain -->\n"
    )
    assert stale_blocks(readme) == ["bench_drain"]
    readme.write_text(rendered(readme.read_text()))
    assert stale_blocks(readme) == []
