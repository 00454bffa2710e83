"""The package ``cloudqueue`` laid out as a wheel installs it, with links to the repository.

``pyproject.toml`` maps three folders to one name: ``workers/cloudqueue`` is the root,
``listener/`` and ``workers/`` are ``cloudqueue.listener`` and ``cloudqueue.workers``. Python
follows that through the editable install's import hook; tools that find modules by their
folders (mypy, griffe for the API reference) do not, so they read this tree instead. It links
rather than copies, so it is always the working tree's code, and it is made without removing
anything, so that several processes (the suite's workers) can make it at once.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from tests.support.paths import REPO_ROOT

TREE = REPO_ROOT / "build" / "package-tree"
"""The folder that holds ``cloudqueue``: put it on the tool's search path."""


def lay_out_package(tree: Path = TREE) -> Path:
    """``tree/cloudqueue`` with the root's files and the two subpackages' folders, linked."""
    package = tree / "cloudqueue"
    package.mkdir(parents=True, exist_ok=True)
    links = {
        source.name: source
        for source in (REPO_ROOT / "workers" / "cloudqueue").iterdir()
        if source.suffix in {".py", ".typed"}
    }
    links |= {folder: REPO_ROOT / folder for folder in ("listener", "workers")}
    for name, target in links.items():
        _link(package / name, target)
    return package


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    with contextlib.suppress(FileExistsError):  # another process made it a moment ago
        link.symlink_to(target, target_is_directory=target.is_dir())
