"""Console log lines: text that came from messages or handlers cannot drive the terminal."""

from __future__ import annotations

import io

import structlog

from cloudqueue.workers.logging import configure_logging
from cloudqueue.workers.settings import LoggingSettings


class Terminal(io.StringIO):
    """A stream that says it is a terminal, so the console renderer is chosen."""

    def isatty(self) -> bool:
        return True


def test_escape_sequences_in_logged_values_are_shown_escaped_on_a_console() -> None:
    """An error text holding ESC, a bell and a bidi override reaches the console as escapes,
    and a traceback keeps its line breaks."""
    terminal = Terminal()
    configure_logging(LoggingSettings(format="console"), stream=terminal)
    try:
        structlog.get_logger("test").warning(
            "message_retry_scheduled", error="boom\x1b[2J\x07\u202e", item="a\nb"
        )
        try:
            raise ValueError("bad\x1b]0;title\x07")
        except ValueError:
            structlog.get_logger("test").exception("handler_traceback")
    finally:
        structlog.reset_defaults()
    shown = terminal.getvalue()
    assert "\x1b[2J" not in shown
    assert "\x07" not in shown
    assert "\u202e" not in shown
    assert "\\x1b[2J" in shown
    assert "a\\nb" in shown
    assert "Traceback (most recent call last):\n" in shown
    assert "\\x1b]0;title" in shown
