"""The package roots import a public name on its first use, and still export exactly ``__all__``.

Each lazy root lists its names three times: ``__all__``, the ``if TYPE_CHECKING:`` imports (what
mypy and the API reference read) and the homes handed to ``lazy_exports`` (what runs). These
tests hold the three equal, and show that importing a root imports none of its names' modules.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

LAZY_ROOTS = [
    "cloudqueue",
    "cloudqueue.listener",
    "cloudqueue.workers",
    "cloudqueue.listener.simulation",
]

Homes = dict[str, list[str]]


def source_of(root: ModuleType) -> ast.Module:
    assert root.__file__ is not None
    return ast.parse(Path(root.__file__).read_text(encoding="utf-8"))


def type_checking_imports(tree: ast.Module) -> Homes:
    """The names the ``if TYPE_CHECKING:`` block imports, by module."""
    homes: Homes = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                assert statement.module is not None
                homes.setdefault(statement.module, []).extend(a.name for a in statement.names)
    return homes


def lazy_homes(tree: ast.Module) -> Homes:
    """The homes literal given to ``lazy_exports``."""
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "lazy_exports"
    ]
    assert len(calls) == 1
    homes: dict[str, tuple[str, ...]] = ast.literal_eval(calls[0].args[1])
    return {module: list(names) for module, names in homes.items()}


@pytest.mark.parametrize("name", LAZY_ROOTS)
def test_all_the_imports_for_mypy_and_the_lazy_homes_name_the_same(name: str) -> None:
    """No name is exported without a home, or typed without being exported."""
    root = importlib.import_module(name)
    tree = source_of(root)
    assert type_checking_imports(tree) == lazy_homes(tree)
    exported = [n for names in lazy_homes(tree).values() for n in names]
    assert sorted(exported) == sorted(root.__all__)


@pytest.mark.parametrize("name", LAZY_ROOTS)
def test_every_name_is_the_object_of_its_home_and_dir_lists_it(name: str) -> None:
    """``root.X`` is ``home.X``; ``dir(root)`` lists every exported name, imported yet or not."""
    root = importlib.import_module(name)
    assert set(root.__all__) <= set(dir(root))
    for module, names in lazy_homes(source_of(root)).items():
        home = importlib.import_module(module)
        for exported in names:
            assert getattr(root, exported) is getattr(home, exported)
    with pytest.raises(AttributeError, match="has no attribute 'NotAName'"):
        _ = root.NotAName


@pytest.mark.parametrize("name", LAZY_ROOTS)
def test_no_exported_name_is_also_a_submodule(name: str) -> None:
    """Importing a submodule sets the package attribute of its name: an exported name of the
    same spelling would then be the module, once that submodule had been imported."""
    root = importlib.import_module(name)
    submodules = {module.name for module in pkgutil.iter_modules(root.__path__)}
    assert sorted(submodules & set(root.__all__)) == []


def test_importing_the_roots_imports_none_of_their_names() -> None:
    """A fresh process that imports both roots has loaded no module of theirs but the roots."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, cloudqueue.listener, cloudqueue.workers, cloudqueue.listener.simulation\n"
            "print(sorted(m for m in sys.modules if m.startswith(('cloudqueue', 'azure', "
            "'redis', 'pydantic', 'structlog', 'reactivex'))))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert ast.literal_eval(done.stdout) == [
        "cloudqueue",
        "cloudqueue._version",
        "cloudqueue.listener",
        "cloudqueue.listener.exports",
        "cloudqueue.listener.simulation",
        "cloudqueue.workers",
    ]


def test_a_name_imported_from_a_root_is_kept_there() -> None:
    """After its first use a name is a plain attribute of the root, as an eager import left it."""
    import cloudqueue.listener as root
    from cloudqueue.listener import Publisher

    assert vars(root)["Publisher"] is Publisher
