"""Tests read the logs of running workers whole line by whole line."""

from __future__ import annotations

from pathlib import Path

from tests.support.written_lines import complete_lines, log_events


def test_a_half_written_last_line_is_not_read_yet(tmp_path: Path) -> None:
    """A poller reads the events written whole; the line still being written waits for its
    newline, then counts."""
    log = tmp_path / "worker.log"
    log.write_text('{"event": "handled", "n": 1}\nplain text\n{"event": "handled", "n"')
    assert complete_lines(log) == ['{"event": "handled", "n": 1}', "plain text"]
    assert log_events(log, "handled") == [{"event": "handled", "n": 1}]
    with log.open("a") as more:
        more.write(": 2}\n")
    assert [event["n"] for event in log_events(log, "handled")] == [1, 2]
    assert complete_lines(tmp_path / "not-yet.log") == []
