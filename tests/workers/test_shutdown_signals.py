"""SIGTERM is heard whatever the main thread is doing when it lands.

Python runs a signal handler in the main thread between two bytecodes of what it was doing. A
handler that logged waited forever when that was writing a log line: structlog's write lock is
not re-entrant. Here the main thread is held inside a log write on purpose (its output is a pipe
nobody reads yet, so the write blocks holding the lock) when the signal comes.
"""

from __future__ import annotations

import os
import select
import signal
import textwrap
import time
from pathlib import Path

from tests.support.polling import eventually
from tests.support.runs import run_environment, start_cloudqueue

FLOODING = """
    from typing import Any

    import structlog

    from cloudqueue import QueueWorker

    log = structlog.get_logger("flooding")


    class Flooding(QueueWorker[dict[str, Any]]):
        queue_name = "work"

        def startup(self) -> None:
            # Far more than a pipe holds (64 KiB): a write blocks until the test reads.
            for n in range(4000):
                log.info("warming", n=n, filler="x" * 100)

        def handle(self, item: dict[str, Any]) -> None:
            pass
"""


def blocked_writing_a_pipe(pid: int) -> bool:
    """The process's main thread waits in the kernel for room in a pipe."""
    return "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()


def read_until_exit(reader: int, deadline_s: float) -> str:
    """Everything written to the pipe until its writers close it (or the deadline)."""
    chunks: list[bytes] = []
    until = time.monotonic() + deadline_s
    while time.monotonic() < until:
        ready, _, _ = select.select([reader], [], [], 0.5)
        if not ready:
            continue
        chunk = os.read(reader, 65536)
        if not chunk:
            break  # every writer closed: the process has ended
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def test_a_sigterm_landing_inside_a_log_write_still_drains_and_exits(tmp_path: Path) -> None:
    """The main thread is blocked writing a log line when SIGTERM comes: once the output flows
    again the worker logs ``shutdown_requested``, drains and exits 0 (it used to hang)."""
    (tmp_path / "flooding.py").write_text(textwrap.dedent(FLOODING))
    output = tmp_path / "output"
    os.mkfifo(output)
    reader = os.open(output, os.O_RDONLY | os.O_NONBLOCK)  # first, so the writer's open returns
    env = run_environment(f"sqlite:///{tmp_path / 'q.db'}", tmp_path)
    process = start_cloudqueue(["run", "flooding:Flooding"], env=env, log_path=output, cwd=tmp_path)
    try:
        eventually(lambda: blocked_writing_a_pipe(process.pid), timeout_s=60)
        process.send_signal(signal.SIGTERM)
        written = read_until_exit(reader, deadline_s=30)
        assert process.wait(10) == 0, written[-2000:]
        assert '"shutdown_requested"' in written
    finally:
        os.close(reader)
        if process.poll() is None:
            process.kill()
            process.wait(10)
