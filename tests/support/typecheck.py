"""mypy --strict over the package as it installs: ``python -m tests.support.typecheck``.

mypy names a module by the folders above its file and cannot follow the import hook of an
editable install, so it checks ``build/package-tree/cloudqueue`` (``tests.support.package_tree``:
links to ``workers/cloudqueue``, ``listener/`` and ``workers/``) with the tests, examples and docs
code that import it. Errors name the tree's paths (``build/package-tree/cloudqueue/listener/x.py``
is ``listener/x.py``).
"""

from __future__ import annotations

import subprocess
import sys

from tests.support.package_tree import lay_out_package
from tests.support.paths import REPO_ROOT

CHECKED_BESIDE = ("tests", "examples", "docs/docsite")


def mypy_command() -> list[str]:
    package = lay_out_package()
    return [
        sys.executable,
        "-m",
        "mypy",
        "--exclude",
        r"cloudqueue/workers/cloudqueue/",  # the root, checked once, as ``cloudqueue``
        str(package.relative_to(REPO_ROOT)),
        *CHECKED_BESIDE,
    ]


def main() -> int:
    return subprocess.run(mypy_command(), cwd=REPO_ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
