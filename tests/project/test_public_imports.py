"""What users are shown imports only the public API: the examples and the docs' Python blocks.

The public modules are the root ``cloudqueue`` with ``cloudqueue.testing`` (what users import
first), the package roots ``cloudqueue.listener`` and ``cloudqueue.workers``, and three
documented sub-modules: ``cloudqueue.listener.testing`` and ``cloudqueue.workers.testing`` (the
test helpers' homes) and ``cloudqueue.listener.simulation`` (the cost simulator's Python entry
point, documented in the "What will it cost?" and "The cheapest settings" how-tos). Each has an
``__all__``; a name is public when it is in its module's ``__all__``. So
``from cloudqueue.listener import Publisher`` passes, while
``from cloudqueue.listener.messages.publisher import Publisher`` and
``import cloudqueue.listener.stores`` are refused: they would break when the internals move.

Checked: every ``.py`` under ``examples/``, and the ``python`` code blocks of ``README.md`` and of
every Markdown page under ``docs/`` and ``examples/`` (a ``--8<--`` snippet line inside a block is
replaced by the text it includes, as the docs build does).
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
PACKAGES = ("cloudqueue",)
PUBLIC_MODULES = (
    "cloudqueue",
    "cloudqueue.testing",
    "cloudqueue.listener",
    "cloudqueue.workers",
    "cloudqueue.listener.testing",
    "cloudqueue.workers.testing",
    "cloudqueue.listener.simulation",
)
FENCE = re.compile(r"^(?P<indent>\s*)```\s*(?P<info>[^`]*)$")
PYTHON_INFO = re.compile(r"^(python|py|\{\s*\.python\s*\})$")
SNIPPET = re.compile(r'^\s*--8<--\s+"(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"\s*$')


@dataclass(frozen=True, slots=True)
class Source:
    """Python text users are shown, and where it comes from (file and first line)."""

    origin: str
    text: str


def public_names() -> dict[str, frozenset[str]]:
    """Each public module's ``__all__``."""
    return {name: frozenset(importlib.import_module(name).__all__) for name in PUBLIC_MODULES}


def refusals(tree: ast.AST, public: dict[str, frozenset[str]]) -> list[str]:
    """The imports in ``tree`` that reach past the public API, one readable line each."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {alias.name}"
                for alias in node.names
                if _ours(alias.name) and alias.name not in public
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module or ""):
            module = node.module or ""
            exported = public.get(module, frozenset())
            found += [
                f"line {node.lineno}: from {module} import {alias.name}"
                for alias in node.names
                if alias.name not in exported
            ]
    return found


def _ours(module: str) -> bool:
    return module.partition(".")[0] in PACKAGES


def example_sources() -> Iterator[Source]:
    """Every example module."""
    for path in sorted((ROOT / "examples").rglob("*.py")):
        yield Source(str(path.relative_to(ROOT)), path.read_text())


def markdown_sources() -> Iterator[Source]:
    """The ``python`` code blocks of the README and of the Markdown pages in docs/ and examples/."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    pages += sorted((ROOT / "examples").rglob("*.md"))
    for page in pages:
        yield from python_blocks(page)


def python_blocks(page: Path) -> Iterator[Source]:
    """The ``python`` fenced blocks of one Markdown page, snippets included, dedented."""
    lines = page.read_text().splitlines()
    block: list[str] | None = None
    indent, start = "", 0
    for number, line in enumerate(lines, start=1):
        fence = FENCE.match(line)
        if block is None and fence and PYTHON_INFO.match(fence["info"].strip()):
            block, indent, start = [], fence["indent"], number + 1
        elif block is not None and fence and not fence["info"].strip():
            text = "\n".join(_included(entry) for entry in block)
            yield Source(f"{page.relative_to(ROOT)}:{start}", text)
            block = None
        elif block is not None:
            block.append(line.removeprefix(indent))


def _included(line: str) -> str:
    """A snippet line replaced by what it includes (a whole file or one marked section)."""
    snippet = SNIPPET.match(line)
    if snippet is None:
        return line
    text = (ROOT / snippet["path"]).read_text()
    if snippet["section"] is None:
        return text
    start = f"# --8<-- [start:{snippet['section']}]\n"
    end = f"# --8<-- [end:{snippet['section']}]\n"
    return text.split(start, 1)[1].split(end, 1)[0]


SOURCES = [*example_sources(), *markdown_sources()]


@pytest.mark.parametrize("source", SOURCES, ids=[source.origin for source in SOURCES])
def test_users_are_shown_only_public_imports(source: Source) -> None:
    """An example or docs block imports from listener/workers only names their ``__all__`` has."""
    refused = refusals(ast.parse(source.text), public_names())
    assert not refused, f"{source.origin} imports past the public API: " + "; ".join(refused)


def test_the_check_sees_the_docs_blocks_and_the_examples() -> None:
    """The collection finds the README's blocks, a docs page's snippet and the example packages."""
    origins = [source.origin for source in SOURCES]
    assert any(origin.startswith("README.md:") for origin in origins)
    assert "examples/billing_pipeline/workers.py" in origins
    assert "examples/deploy/sizing.py" in origins
    testing_page = [s for s in SOURCES if s.origin.startswith("docs/getting-started/testing.md")]
    assert any("run_until_drained" in source.text for source in testing_page)


def test_deep_and_non_exported_imports_are_refused() -> None:
    """Deep module paths, names missing from ``__all__`` and non-public modules are all refused."""
    code = "\n".join(
        [
            "from cloudqueue.listener import Publisher, QueueStorage",
            "from cloudqueue.workers.testing import run_until_drained",
            "from cloudqueue.listener.simulation import simulate",
            "import cloudqueue.listener, cloudqueue.workers",
            "from cloudqueue.listener.messages.publisher import Publisher",
            "from cloudqueue.workers import host",
            "import cloudqueue.listener.stores.connection",
            "from cloudqueue.listener.testing import START",
            "from . import sibling",
            "import json",
        ]
    )
    assert refusals(ast.parse(code), public_names()) == [
        "line 5: from cloudqueue.listener.messages.publisher import Publisher",
        "line 6: from cloudqueue.workers import host",
        "line 7: import cloudqueue.listener.stores.connection",
        "line 8: from cloudqueue.listener.testing import START",
    ]
