"""Which settings files a command reads, and when it refuses one.

The TOML file is ``--config PATH``, else ``$CLOUDQUEUE_CONFIG``, else ``config/cloudqueue.toml``
when present (``config_file_path``); the ``.env`` file is the working folder's.

A file named on purpose -- ``--config PATH`` or ``CLOUDQUEUE_CONFIG`` -- is read as it is: the
user chose it. The files found in the working folder -- ``config/cloudqueue.toml`` and ``.env`` --
are read only when no other account could have written them: owned by the user running the
command (or by root, as files a container image or a Kubernetes volume provides are) and not
writable by others. Otherwise the command stops with exit code 2 naming the file, as ``git``
refuses a repository owned by someone else: a shared or cloned folder must not choose the store,
the credential or the Redis a command talks to. Group-writable files are accepted (a umask of
002 makes them so, on many systems, for one's own group).
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, TomlConfigSettingsSource

from cloudqueue.listener.errors import ConfigurationError

DOTENV_FILE = Path(".env")
DEFAULT_CONFIG_FILE = Path("config/cloudqueue.toml")

_config_file: ContextVar[Path | None] = ContextVar("cloudqueue_config_file", default=None)
"""The TOML file the settings being built read (pydantic-settings builds its sources without
arguments, so ``load_settings`` names the file here for the while)."""


def config_file_path(explicit: Path | None = None) -> Path | None:
    """The TOML file to read: explicit, else $CLOUDQUEUE_CONFIG, else the default if present and
    no other account could have written it (``found_file``: ConfigurationError otherwise)."""
    if explicit is not None:
        return explicit
    from_env = os.environ.get("CLOUDQUEUE_CONFIG")
    if from_env:
        return Path(from_env)
    return found_file(DEFAULT_CONFIG_FILE) if DEFAULT_CONFIG_FILE.is_file() else None


@contextmanager
def reading_config_file(path: Path | None) -> Iterator[None]:
    """Within the block, settings built read the TOML file ``path`` (None: no file)."""
    token = _config_file.set(path)
    try:
        yield
    finally:
        _config_file.reset(token)


def toml_source(settings_cls: type[BaseSettings]) -> PydanticBaseSettingsSource:
    """The TOML file's settings; a syntax error names the file, line and column."""
    path = _config_file.get()
    try:
        return TomlConfigSettingsSource(settings_cls, toml_file=path)
    except tomllib.TOMLDecodeError as error:
        # tomllib's message ends in "(at line L, column C)".
        raise ConfigurationError(f"config file {path} is not valid TOML: {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"cannot read config file {path}: {error}") from None


def toml_label() -> str:
    """How errors name the TOML source: ``config file PATH``."""
    return f"config file {_config_file.get()}"


def found_file(path: Path) -> Path:
    """``path``, a settings file found in the working folder, once checked as described above.

    Raises ConfigurationError naming the file, why it is refused and what to do.
    """
    info = path.stat()
    if info.st_uid not in (os.geteuid(), 0):
        raise ConfigurationError(
            f"refusing {path}: it belongs to user id {info.st_uid}, not to you; {_remedy(path)}"
        )
    if info.st_mode & stat.S_IWOTH:
        raise ConfigurationError(
            f"refusing {path}: it is writable by others (mode {oct(stat.S_IMODE(info.st_mode))}); "
            f"run `chmod o-w {path}` or {_remedy(path)}"
        )
    return path


def check_found_dotenv() -> None:
    """Check the working folder's ``.env``, if there is one."""
    if DOTENV_FILE.is_file():
        found_file(DOTENV_FILE)


def _remedy(path: Path) -> str:
    if path == DOTENV_FILE:
        return "make it yours, or run from a folder of yours"
    return "name it with --config to read it anyway"


__all__ = [
    "DEFAULT_CONFIG_FILE",
    "DOTENV_FILE",
    "check_found_dotenv",
    "config_file_path",
    "found_file",
    "reading_config_file",
    "toml_label",
    "toml_source",
]
