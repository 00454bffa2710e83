"""Loading user code named in configuration as ``package.module:attribute``."""

from __future__ import annotations

import importlib

from listener.errors import ConfigurationError


def import_object(path: str, *, what: str) -> object:
    """The attribute a ``package.module:attribute`` path names; ConfigurationError otherwise.

    ``what`` names the thing in error messages ("custom rule", "worker").
    """
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"{what} {path!r} must look like 'package.module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(f"cannot import {what} module {module_name!r}: {error}") from error
    if not hasattr(module, attribute):
        raise ConfigurationError(f"{what} {path!r}: module {module_name!r} has no {attribute!r}")
    return getattr(module, attribute)
