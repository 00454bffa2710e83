"""Private files for the embedded store: folders 0700, files 0600, whatever the umask.

The queues, their payloads and the workers' live state may hold anything the producers sent:
only the account that runs cloudqueue may read them. A folder or file cloudqueue creates gets
exactly these modes (set with ``chmod`` after creating it, as the umask only removes bits). One
found looser -- left by an older version, or made by hand -- is tightened with a warning
(``made_private``), never silently. A folder cloudqueue did not name itself (``data/`` in
``sqlite:///data/q.db``, or ``/tmp``) is the user's: created 0700 when missing, else left alone.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import structlog

PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600
STATE_FOLDER_NAME = ".cloudqueue"
"""The default state folder's name: cloudqueue's own, so an existing one is tightened."""

log = structlog.get_logger(__name__)


def private_folder(path: Path, *, ours: bool = True) -> None:
    """Create ``path`` and its missing parents 0700; tighten it if it exists and is ``ours``.

    Raises OSError as ``mkdir`` and ``chmod`` do.
    """
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_FOLDER)
        except FileExistsError:
            continue  # another process made it first: it is then checked as an existing one
        folder.chmod(PRIVATE_FOLDER)
    if path not in missing and ours:
        _tighten(path, PRIVATE_FOLDER)


def private_file(path: Path) -> None:
    """Create ``path`` empty and 0600 if missing, else tighten it. Raises OSError."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        _tighten(path, PRIVATE_FILE)
        return
    try:
        os.fchmod(descriptor, PRIVATE_FILE)
    finally:
        os.close(descriptor)


def tighten_if_present(path: Path) -> None:
    """Tighten ``path`` to 0600 if it exists (a database's -wal and -shm files)."""
    with contextlib.suppress(FileNotFoundError):
        _tighten(path, PRIVATE_FILE)


def _tighten(path: Path, private: int) -> None:
    current = stat.S_IMODE(path.stat().st_mode)
    if current & ~private:
        tightened = current & private
        path.chmod(tightened)
        log.warning(
            "made_private", path=str(path), mode_was=oct(current), mode=oct(current & private)
        )


__all__ = [
    "PRIVATE_FILE",
    "PRIVATE_FOLDER",
    "STATE_FOLDER_NAME",
    "private_file",
    "private_folder",
    "tighten_if_present",
]
