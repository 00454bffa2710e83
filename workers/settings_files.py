"""Which settings files a command reads, and when it refuses one.

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
from pathlib import Path

from listener.errors import ConfigurationError

DOTENV_FILE = Path(".env")


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


__all__ = ["DOTENV_FILE", "check_found_dotenv", "found_file"]
