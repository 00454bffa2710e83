"""The docs' benchmark figures come from the committed results, never typed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.render_readme import (
    RenderError,
    block_names,
    docs_blocks,
    problems,
    render_block,
    rendered,
    unpublished_results,
)


def test_every_committed_result_is_on_a_docs_page_and_renders() -> None:
    """Each results file has its block on a Performance page, and each block renders."""
    assert docs_blocks(), "the docs have no generated benchmark block"
    assert problems() == []


def test_the_page_sources_type_no_figure_inside_a_block() -> None:
    """Blocks are left empty in the sources: the build fills them, so nothing there can go stale."""
    for name, pages in docs_blocks().items():
        for page in pages:
            text = page.read_text(encoding="utf-8")
            assert f"<!-- bench:{name} -->\n<!-- /bench:{name} -->" in text, page


def test_a_hand_typed_block_is_replaced_by_the_results(tmp_path: Path) -> None:
    """Whatever a block holds, the build shows what its results render to."""
    page = "# x\n<!-- bench:bench_drain -->\n| 4 | 999 msg/s |\n<!-- /bench:bench_drain -->\n"
    shown = rendered(page)
    assert "999 msg/s" not in shown
    assert render_block("bench_drain") in shown
    assert block_names(shown) == ["bench_drain"]


def test_a_result_missing_from_the_docs_is_reported(tmp_path: Path) -> None:
    """A results file that no page shows is named by the check."""
    docs, results = tmp_path / "docs", tmp_path / "results"
    docs.mkdir()
    results.mkdir()
    (results / "bench_new.json").write_text("{}")
    (docs / "page.md").write_text("no blocks here\n")
    assert unpublished_results(docs, results) == ["bench_new"]


def test_a_block_naming_a_part_shows_that_part_of_the_results() -> None:
    """``bench:NAME:PART`` holds ``render_markdown(results, PART)``: one benchmark's figures on
    several pages, each page its own part."""
    page = "<!-- bench:bench_hostile:triggers -->\n<!-- /bench:bench_hostile:triggers -->\n"
    shown = rendered(page)
    assert render_block("bench_hostile:triggers") in shown
    assert render_block("bench_hostile:decoding") not in shown
    assert block_names(shown) == ["bench_hostile:triggers"]


def test_a_part_the_benchmark_does_not_render_is_an_error() -> None:
    """A misspelt part names the block, not an empty table."""
    with pytest.raises(RenderError, match="has no part 'trigger'"):
        render_block("bench_hostile:trigger")
