"""Reading the log (or record) file of a process that is still writing it.

A test polls such a file while the worker appends to it, so the last line may be half written:
parsed, it is a broken JSON document or a short record, and the poll fails instead of waiting.
Only lines that end in their newline have been written whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def complete_lines(path: Path) -> list[str]:
    """The lines of ``path`` written whole so far (none when it does not exist yet)."""
    if not path.exists():
        return []
    # After the last newline comes either nothing or a line still being written.
    return path.read_text(errors="replace").split("\n")[:-1]


def log_events(path: Path, name: str | None = None) -> list[dict[str, Any]]:
    """The JSON log events written whole to ``path``, only those called ``name`` if given."""
    events = [json.loads(line) for line in complete_lines(path) if line.startswith("{")]
    return [event for event in events if name is None or event.get("event") == name]
