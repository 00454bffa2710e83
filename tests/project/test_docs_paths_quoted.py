"""Every docs page that the code quotes exists: an error line or a log event that says "see
docs/….md" sends its reader to a page that is there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.paths import REPO_ROOT

DOCS_PATH = re.compile(r"docs/[\w./-]+?\.md")


def quoted_docs_paths(source: str) -> set[str]:
    """The ``docs/….md`` paths in a module's string literals (f-strings' text parts included)."""
    return {
        path
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for path in DOCS_PATH.findall(node.value)
    }


def test_the_scan_finds_paths_in_plain_and_formatted_strings() -> None:
    """A path in a constant and in the text of an f-string are both found."""
    source = 'A = "see docs/a/b.md"\nB = f"{x} or docs/c-d.md, then"\n'
    assert quoted_docs_paths(source) == {"docs/a/b.md", "docs/c-d.md"}


def test_every_docs_page_quoted_in_the_code_exists() -> None:
    """Scans every string literal of listener/ and workers/ for docs paths."""
    modules = [*REPO_ROOT.glob("listener/**/*.py"), *REPO_ROOT.glob("workers/**/*.py")]
    quoted = {
        (path, str(module.relative_to(REPO_ROOT)))
        for module in modules
        for path in quoted_docs_paths(module.read_text(encoding="utf-8"))
    }
    assert quoted, "the scan found no docs path at all: the pattern no longer matches"
    missing = sorted(
        (module, path) for path, module in quoted if not Path(REPO_ROOT, path).is_file()
    )
    assert missing == []
