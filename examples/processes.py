"""Starting and stopping the examples' worker processes (``cloudqueue run`` children)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

STOP_TIMEOUT_S = 30.0


def spawn_worker(
    target: str, *, env: Mapping[str, str] | None = None, output: IO[bytes] | None = None
) -> subprocess.Popen[bytes]:
    """``cloudqueue run TARGET`` in a child process (its own process group), importing this
    checkout's ``examples`` package whatever the working directory."""
    checkout = str(Path(__file__).resolve().parents[1])
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONPATH"] = os.pathsep.join(
        part for part in (checkout, child_env.get("PYTHONPATH")) if part
    )
    return subprocess.Popen(
        [sys.executable, "-m", "cloudqueue", "run", target],
        env=child_env,
        stdin=subprocess.DEVNULL,
        stdout=output if output is not None else subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_worker(process: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM (drain in-flight items), then SIGKILL if it does not exit in time."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        kill_worker(process)
        return process.wait()


def kill_worker(process: subprocess.Popen[bytes]) -> None:
    """``kill -9``: no drain, no clean-up; its messages reappear after their visibility timeout."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
