"""Docstrings and docs pages name only code that exists: every ``listener.…`` or ``workers.…``
they quote as code resolves to a module, or to a name in one."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
QUOTED = re.compile(r"``?((?:cloudqueue\.)?(?:listener|workers)(?:\.\w+)+)(?:\(\))?``?")
"""A dotted name quoted as code: ``cloudqueue.listener.x`` in a docstring, `listener.concurrency`
(a setting) on a page."""


def quoted_names(text: str) -> set[str]:
    return set(QUOTED.findall(text))


def sources() -> list[Path]:
    code = [*ROOT.glob("listener/**/*.py"), *ROOT.glob("workers/**/*.py")]
    pages = [*ROOT.glob("docs/**/*.md"), ROOT / "README.md"]
    return sorted(path for path in code + pages if "changelog" not in path.name)


def is_setting(dotted: str) -> bool:
    """``listener.concurrency`` on a page is the setting (section ``listener``), not code."""
    from cloudqueue.workers.settings import ListenerSettings

    section, _, key = dotted.partition(".")
    return section == "listener" and key in ListenerSettings.model_fields


def resolves(dotted: str) -> bool:
    """True when the longest importable prefix is a module and the rest are its attributes (a
    setting's key, or a file's name, counts as resolved)."""
    if is_setting(dotted) or dotted.endswith(".py"):
        return True
    if not dotted.startswith("cloudqueue."):
        return False  # code is named by the name it installs as
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        module_name = ".".join(parts[:end])
        try:
            value: object = importlib.import_module(module_name)
        except ImportError:
            continue
        for attribute in parts[end:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


def test_quoting_finds_module_paths_and_names() -> None:
    """The pattern picks quoted dotted names and leaves plain words alone."""
    text = (
        "see ``cloudqueue.listener.wire.payload`` and "
        "`cloudqueue.workers.settings.CloudQueueSettings`; listener ok"
    )
    assert quoted_names(text) == {
        "cloudqueue.listener.wire.payload",
        "cloudqueue.workers.settings.CloudQueueSettings",
    }
    assert resolves("cloudqueue.listener.consumer.dequeue.STRETCH_S")
    assert not resolves("listener.handling")
    assert not resolves("cloudqueue.listener.wire.payload.no_such_name")


@pytest.mark.parametrize("path", sources(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_quoted_name_exists(path: Path) -> None:
    """A moved or renamed module leaves no stale name behind in the text that explains it."""
    stale = sorted(name for name in quoted_names(path.read_text()) if not resolves(name))
    assert not stale, f"{path.relative_to(ROOT)} names code that does not exist: {stale}"
