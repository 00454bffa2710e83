"""Importing by name: user code named in configuration, and the packages of optional extras.

``import_object`` loads a ``package.module:attribute`` path (a worker, a scaling rule, a
credential) and, when the module or the attribute is not there, names the closest one that is
("did you mean"). ``import_extra`` imports a package that an optional extra installs
(``cloudqueue[dashboard]``, ``[plot]``, ``[identity]``, ``[reload]``) and, when it is missing,
raises ``MissingExtraError``, a configuration error naming the ``pip install`` line, so every
command exits 2 with it; ``extra_installed`` asks without raising (``[otel]`` is used only when
present).

Naming is checked apart from loading: settings validate the form of a path when they are read
(every command, ``check_object_path``), and only the commands that run workers import it
(``cloudqueue run``), so that inspecting a folder's settings never runs the code they name.
"""

from __future__ import annotations

import difflib
import importlib
import os
import pkgutil
from collections.abc import Iterable
from types import ModuleType

from cloudqueue.listener.errors import ConfigurationError, MissingExtraError

OWN_PACKAGES = ("cloudqueue",)
"""A missing module under these is a bug in cloudqueue, never a missing extra."""


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like a misspelt name, if any is close."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def check_object_path(path: str, *, what: str) -> str:
    """``path`` if it has the form ``package.module:attribute``; ConfigurationError otherwise.

    Nothing is imported. ``what`` names the thing in error messages ("custom rule", "worker").
    """
    module_name, _, attribute = path.partition(":")
    dotted = module_name.split(".")
    if not attribute.isidentifier() or not all(part.isidentifier() for part in dotted):
        raise ConfigurationError(f"{what} {path!r} must look like 'package.module:attribute'")
    return path


def import_object(path: str, *, what: str) -> object:
    """The attribute a ``package.module:attribute`` path names; ConfigurationError otherwise.

    ``what`` names the thing in error messages ("custom rule", "worker").
    """
    module_name, _, attribute = check_object_path(path, what=what).partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        hint = _module_hint(module_name, error, attribute)
        raise ConfigurationError(
            f"cannot import {what} module {module_name!r}: {error}{hint}"
        ) from error
    if not hasattr(module, attribute):
        suggestion = closest(attribute, _public_names(module))
        hint = f": did you mean '{module_name}:{suggestion}'?" if suggestion else ""
        raise ConfigurationError(
            f"{what} {path!r}: module {module_name!r} has no {attribute!r}{hint}"
        )
    return getattr(module, attribute)


def import_extra(module: str, *, extra: str, needed_by: str) -> ModuleType:
    """The module, imported; ``MissingExtraError`` naming ``pip install 'cloudqueue[extra]'``
    when it (or a package it imports) is not installed. ``needed_by`` names the feature."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        missing = error.name or module
        if missing.partition(".")[0] in OWN_PACKAGES:
            raise  # cloudqueue itself is broken: show the real problem
        raise MissingExtraError(
            f"{needed_by} needs the {extra} extra: pip install 'cloudqueue[{extra}]' "
            f"(cannot import {missing})"
        ) from None


def extra_installed(module: str) -> bool:
    """True when the module of an optional extra can be imported."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _module_hint(module_name: str, error: ImportError, attribute: str) -> str:
    """``: did you mean 'pkg.module:attr'?`` when the missing module (the path's own, or a
    package on it) is a misspelling of one that exists beside it; for a top-level one that is
    not, the folder searched; empty when the module exists but failed inside."""
    missing = error.name
    if missing is None or not (module_name == missing or module_name.startswith(f"{missing}.")):
        return ""  # the module was found; something it imports was not
    parent, _, leaf = missing.rpartition(".")
    siblings = _modules_in(parent)
    suggestion = closest(leaf, siblings) if siblings is not None else None
    if suggestion is not None:
        fixed = f"{parent}.{suggestion}" if parent else suggestion
        return f"; did you mean '{fixed}{module_name[len(missing) :]}:{attribute}'?"
    if not parent:
        return (
            f"; no such module in the working folder {os.getcwd()}: run from your project's "
            "folder, or add the folder that holds it to PYTHONPATH"
        )
    return ""


def _modules_in(package: str) -> list[str] | None:
    """The modules a package holds or, for ``""``, the user's project (the working folder): never
    the standard library's or an installed package's, which a misspelt module of the user's is
    not (from the wrong folder, 'getpas' is no typo of 'getpass')."""
    if not package:
        return [module.name for module in pkgutil.iter_modules([os.getcwd()])]
    try:
        path = importlib.import_module(package).__path__
    except (ImportError, AttributeError):
        return None  # the parent itself is missing, or is a module, not a package
    return [module.name for module in pkgutil.iter_modules(path)]


def _public_names(module: ModuleType) -> list[str]:
    return [name for name in vars(module) if not name.startswith("_")]


__all__ = ["closest", "extra_installed", "import_extra", "import_object"]
