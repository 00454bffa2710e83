"""MkDocs hooks (``hooks:`` in ``mkdocs.yml``): generated pages and the repository's images.

MkDocs loads this file by path, so the repository root and ``docs/`` go on ``sys.path`` first:
the generators (this package, ``docs/docsite``) import ``cloudqueue.listener``,
``cloudqueue.workers`` and the benchmark renderers in ``tests.benchmarks``. The API reference
reads the package from ``build/package-tree`` (``mkdocs.yml``), laid out here as it installs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT, ROOT / "docs"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from mkdocs.structure.files import File, Files  # noqa: E402

from docsite import generated  # noqa: E402
from tests.support.package_tree import lay_out_package  # noqa: E402

lay_out_package()

REPOSITORY_IMAGES = {"images/dashboard.png": ROOT / "examples" / "dashboard" / "dashboard.png"}
"""Images kept beside the code they show, published under docs' own paths."""


def on_files(files: Files, *, config: Any) -> Files:
    for uri, source in REPOSITORY_IMAGES.items():
        files.append(File.generated(config, uri, abs_src_path=str(source)))
    return files


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Files) -> str:
    return generated.render(markdown)
