"""Rewrite the README's benchmark blocks from the committed results, so no figure is typed by hand.

Run ``.venv/bin/python -m tests.benchmarks.render_readme`` after a benchmark wrote its results
(``--write``); ``--check`` changes nothing and exits 1 when the README differs from what the
results say. Each block ``<!-- bench:NAME -->`` ... ``<!-- /bench:NAME -->`` holds
``tests.benchmarks.NAME.render_markdown(results)`` of ``tests/benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.benchmarks.results_file import load_results, results_path

README = Path(__file__).resolve().parents[2] / "README.md"

_BLOCK = re.compile(
    r"(?P<open><!-- bench:(?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)"
    r"(?P<close><!-- /bench:(?P=name) -->)",
    re.DOTALL,
)


class RenderError(RuntimeError):
    """A block names a benchmark without results, or without a render_markdown function."""


def block_names(text: str) -> list[str]:
    return [match["name"] for match in _BLOCK.finditer(text)]


def render_block(name: str) -> str:
    """The markdown for one benchmark, from its results file."""
    if not results_path(name).is_file():
        raise RenderError(f"README block bench:{name} has no results file {results_path(name)}")
    module = importlib.import_module(f"tests.benchmarks.{name}")
    render = getattr(module, "render_markdown", None)
    if render is None:
        raise RenderError(f"tests.benchmarks.{name} has no render_markdown(results)")
    body: str = render(load_results(name))
    return body if body.endswith("\n") else body + "\n"


def rendered(text: str) -> str:
    """The README text with every benchmark block rewritten from its results."""
    return _BLOCK.sub(
        lambda match: match["open"] + render_block(match["name"]) + match["close"], text
    )


def stale_blocks(readme: Path = README) -> list[str]:
    """The names of the blocks whose text differs from what their results render to."""
    text = readme.read_text()
    fresh = rendered(text)
    current = {m["name"]: m["body"] for m in _BLOCK.finditer(text)}
    return [m["name"] for m in _BLOCK.finditer(fresh) if current.get(m["name"]) != m["body"]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.render_readme")
    parser.add_argument("--check", action="store_true", help="exit 1 if the README is stale")
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_blocks(args.readme)
            for name in stale:
                print(f"README block bench:{name} is stale: run {parser.prog}", file=sys.stderr)
            return 1 if stale else 0
        text = args.readme.read_text()
        args.readme.write_text(rendered(text))
    except RenderError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"rewrote {', '.join(block_names(text)) or 'no'} block(s) in {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
