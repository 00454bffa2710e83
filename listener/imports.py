"""Loading user code named in configuration as ``package.module:attribute``.

Naming is checked apart from loading: settings validate the form of a path when they are read
(every command), and only the commands that run workers import it (``cloudqueue run``), so that
inspecting a folder's settings never runs the code they name.
"""

from __future__ import annotations

import importlib

from listener.errors import ConfigurationError


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
        raise ConfigurationError(f"cannot import {what} module {module_name!r}: {error}") from error
    if not hasattr(module, attribute):
        raise ConfigurationError(f"{what} {path!r}: module {module_name!r} has no {attribute!r}")
    return getattr(module, attribute)
