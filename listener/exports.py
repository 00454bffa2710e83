"""Package roots that import a public name on its first use, not when the root is imported.

``cloudqueue.listener`` and ``cloudqueue.workers`` export about a hundred names whose modules
between them import Redis, the Azure SDK, pydantic-settings, prometheus and rich. A command or a
producer that needs two of them should not pay for all: every ``cloudqueue`` command would start
in a second and a half. So a root imports nothing at run time. It keeps its literal ``__all__``
(the public surface) and an ``if TYPE_CHECKING:`` block importing every name from its home (what
mypy and the API reference read), and takes ``__getattr__`` and ``__dir__`` from ``lazy_exports``
(PEP 562, as pydantic does): ``from cloudqueue.listener import Publisher`` imports the publisher's
module then, and the name stays in the root's namespace, as a plain import would have left it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, homes: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose names live in modules of ``homes``.

    ``homes`` maps a module's full name to the public names it defines. ``dir(package)`` lists
    them whether they were imported yet or not.
    """
    home_of = {name: module for module, names in homes.items() for name in names}
    namespace = vars(sys.modules[package])

    def attribute(name: str) -> object:
        module = home_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # the next use is a plain attribute, without this function
        return value

    def names() -> list[str]:
        return sorted(set(namespace) | set(home_of))

    return attribute, names


__all__ = ["lazy_exports"]
