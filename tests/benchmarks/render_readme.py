"""Benchmark blocks of the docs, rendered from the committed results: no figure is typed by hand.

Each block ``<!-- bench:NAME -->`` ... ``<!-- /bench:NAME -->`` of a docs page (the Performance
pages) holds ``tests.benchmarks.NAME.render_markdown(results)`` of
``tests/benchmarks/results/NAME.json``. A benchmark whose figures belong on several pages names
its ``PARTS``: the block ``<!-- bench:NAME:PART -->`` ... ``<!-- /bench:NAME:PART -->`` holds
``render_markdown(results, PART)``. The page sources leave the blocks empty: the docs build
(``docsite.hooks``) fills them with ``rendered`` at every build, so a page never shows figures
other than the committed results'. After a benchmark wrote its results (``--write``), rebuild the
docs (``mkdocs serve`` shows them at once).

``python -m tests.benchmarks.render_readme --check`` exits 1 when a block names a benchmark
without results, renderer or part, or a results file has no block on any page; ``NAME`` (or
``NAME:PART``) prints one block.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.benchmarks.results_file import RESULTS_DIR, load_results, results_path

DOCS = Path(__file__).resolve().parents[2] / "docs"

_BLOCK = re.compile(
    r"(?P<open><!-- bench:(?P<name>[a-z0-9_]+(?::[a-z0-9_]+)?) -->\n)(?P<body>.*?)"
    r"(?P<close><!-- /bench:(?P=name) -->)",
    re.DOTALL,
)


class RenderError(RuntimeError):
    """A block names a benchmark without results, without a render_markdown function, or a part
    the benchmark does not render."""


def block_names(text: str) -> list[str]:
    """The blocks of a page: ``NAME``, or ``NAME:PART`` for one part of a benchmark's figures."""
    return [match["name"] for match in _BLOCK.finditer(text)]


def bench_of(block: str) -> str:
    """The benchmark a block shows (``NAME`` of ``NAME`` or ``NAME:PART``)."""
    return block.partition(":")[0]


def render_block(block: str) -> str:
    """The markdown for one block (a benchmark, or one part of it), from its results file."""
    name, _, part = block.partition(":")
    if not results_path(name).is_file():
        raise RenderError(f"docs block bench:{block} has no results file {results_path(name)}")
    module = importlib.import_module(f"tests.benchmarks.{name}")
    render = getattr(module, "render_markdown", None)
    if render is None:
        raise RenderError(f"tests.benchmarks.{name} has no render_markdown(results)")
    if part and part not in getattr(module, "PARTS", ()):
        raise RenderError(f"docs block bench:{block}: tests.benchmarks.{name} has no part {part!r}")
    body: str = render(load_results(name), part) if part else render(load_results(name))
    return body if body.endswith("\n") else body + "\n"


def rendered(text: str) -> str:
    """The page text with every benchmark block filled from its results (whatever it held)."""
    return _BLOCK.sub(
        lambda match: match["open"] + render_block(match["name"]) + match["close"], text
    )


def docs_blocks(docs: Path = DOCS) -> dict[str, list[Path]]:
    """Every benchmark block of the docs pages (``NAME`` or ``NAME:PART``), with the pages that
    show it."""
    found: dict[str, list[Path]] = {}
    for page in sorted(docs.rglob("*.md")):
        for name in block_names(page.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(page)
    return found


def unpublished_results(docs: Path = DOCS, results_dir: Path = RESULTS_DIR) -> list[str]:
    """Benchmarks with committed results that no docs page shows."""
    shown = {bench_of(block) for block in docs_blocks(docs)}
    return sorted(path.stem for path in results_dir.glob("*.json") if path.stem not in shown)


def problems(docs: Path = DOCS, results_dir: Path = RESULTS_DIR) -> list[str]:
    """What keeps the docs from showing every committed result: one line per problem."""
    found = [
        f"results of {name} are on no docs page" for name in unpublished_results(docs, results_dir)
    ]
    for name in docs_blocks(docs):
        try:
            render_block(name)
        except RenderError as error:
            found.append(str(error))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.render_readme")
    parser.add_argument("--check", action="store_true", help="exit 1 if a block cannot render")
    parser.add_argument("name", nargs="?", help="print this block (NAME or NAME:PART)")
    args = parser.parse_args(argv)
    if args.check:
        found = problems()
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    if args.name is None:
        parser.error("give a benchmark NAME to print, or --check")
    try:
        print(render_block(args.name), end="")
    except RenderError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
