"""structlog configuration: JSON lines for machines, readable console output on a terminal.

Every record passes through ``redact_secrets`` last before rendering, so a connection string or
SAS token that slips into an event or exception text is masked wherever it appears.
"""

from __future__ import annotations

import io
import logging
import os
import sys
from typing import TextIO, cast

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from cloudqueue.listener.redaction import redact
from cloudqueue.workers.host.child_slot import CHILD_SLOT_VARIABLE
from cloudqueue.workers.settings import LoggingSettings


def redact_secrets(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Mask secrets in every string value (exception text included, once rendered)."""
    return {
        key: redact(value) if isinstance(value, str) else value for key, value in event_dict.items()
    }


def child_slot(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Name the supervisor's child slot on every line of a ``--processes N`` child."""
    slot = os.environ.get(CHILD_SLOT_VARIABLE)
    if slot is not None:
        event_dict.setdefault("child", int(slot) if slot.isdigit() else slot)
    return event_dict


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` safe for a terminal: every non-printable character (escape sequences' ESC, C1
    controls, bidi overrides, lone surrogates) as its backslash escape (``repr``'s, e.g.
    ``\\x1b``); line breaks kept only with ``lines``. Other text is unchanged."""
    if text.isprintable():
        return text
    kept = "\n" if lines else ""
    return "".join(c if c.isprintable() or c in kept else repr(c)[1:-1] for c in text)


def escape_for_terminal(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Console lines show text from messages and handlers: none of it may drive the terminal.
    (JSON lines escape it already.) Tracebacks keep their line breaks."""
    for key, value in event_dict.items():
        if isinstance(value, str):
            event_dict[key] = printable(value, lines=key == "exception")
    return event_dict


def configure_logging(
    settings: LoggingSettings,
    *,
    stream: TextIO | io.TextIOBase | None = None,
    console_renderer: Processor | None = None,
) -> None:
    """Configure structlog for a worker process writing to ``stream`` (stderr by default).

    What ``cloudqueue run`` does at start; call it once when you run a ``WorkerHost`` (or a
    listener) in your own process. ``settings`` is the ``logging`` section: JSON lines when
    ``format`` is ``json``, or ``auto`` and ``stream`` is not a terminal; readable console lines
    otherwise. Either way secrets are masked (a connection string or SAS token that slips into an
    event or exception text), and console lines show text from messages escaped, so that it cannot
    drive the terminal. The Azure SDK's per-request logging is kept to warnings.

    ``console_renderer`` replaces structlog's console renderer on a terminal (the demo narrates);
    JSON output is never replaced: machines keep every event. Under a ``LiveProgress`` status
    line, pass ``stream=ConsoleStream(console)`` so that log lines print above it.
    """
    output = stream or sys.stderr
    use_json = settings.format == "json" or (settings.format == "auto" and not output.isatty())
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        child_slot,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: list[Processor]
    if use_json:
        renderer = [
            structlog.processors.format_exc_info,
            redact_secrets,
            structlog.processors.JSONRenderer(),
        ]
    else:
        renderer = [
            structlog.processors.format_exc_info,
            redact_secrets,
            escape_for_terminal,
            console_renderer or structlog.dev.ConsoleRenderer(colors=output.isatty()),
        ]
    # The Azure SDK logs every HTTP request at INFO through stdlib logging: keep it to problems.
    logging.getLogger("azure").setLevel(logging.WARNING)
    structlog.configure(
        processors=[*shared, *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(settings.level)),
        # Any text stream will do (e.g. the live status line's console): structlog only writes.
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, output)),
        cache_logger_on_first_use=False,
    )


__all__ = ["configure_logging", "escape_for_terminal", "printable", "redact_secrets"]
