"""Running the real ``cloudqueue`` command in tests: with pipes, or on a pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

from click.testing import CliRunner

from cloudqueue.workers.cli import cli
from tests.support.cli_fork import interpreter_agrees, run_forked

ANSI_SEQUENCE = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-B]|[=>])")


def plain(shown: str) -> str:
    """What stays readable of terminal output: escape sequences removed, ``\\r`` as a new line."""
    return ANSI_SEQUENCE.sub("", shown).replace("\r\n", "\n").replace("\r", "\n")


def cloudqueue(
    *args: str,
    env: dict[str, str],
    stdin: str = "",
    cwd: Path | None = None,
    fresh: bool = False,
    timeout_s: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run the CLI with stdin, stdout and stderr all pipes (no terminal anywhere), in ``cwd``.

    The command runs in a process of its own, forked from a warm fork server
    (``tests.support.cli_fork``); ``fresh=True`` starts a new interpreter instead, for a test
    about what an interpreter start imports. An environment that changes a ``PYTHON*``
    variable gets a new interpreter too, as those act only when one starts.
    """
    if fresh or not interpreter_agrees(env):
        return subprocess.run(
            [sys.executable, "-m", "cloudqueue", *args],
            input=stdin,
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    return run_forked(list(args), env=env, stdin=stdin, cwd=cwd or Path.cwd(), timeout_s=timeout_s)


def help_text(*args: str) -> str:
    """``cloudqueue ARGS --help`` in this process (click's CliRunner): printing help opens no
    store and configures nothing, so a subprocess would only add an interpreter start."""
    result = CliRunner().invoke(cli, [*args, "--help"], prog_name="cloudqueue")
    assert result.exit_code == 0, result.output
    return result.output


def ok(*args: str, env: dict[str, str], stdin: str = "") -> str:
    """Run the CLI, require exit code 0, and return its stdout."""
    result = cloudqueue(*args, env=env, stdin=stdin)
    assert result.returncode == 0, result.stderr
    return result.stdout


class Terminal:
    """A pseudo-terminal for a child process; everything the child writes to it is collected."""

    def __init__(self, *, columns: int = 140, rows: int = 40) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: every writer has closed the terminal
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def shown(self) -> str:
        """What the child wrote so far (the terminal stays open)."""
        return b"".join(list(self._chunks)).decode(errors="replace")

    def output(self) -> str:
        """What the child wrote, once it has exited (the terminal is closed here)."""
        os.close(self.slave)
        self._reader.join(10)
        os.close(self.master)
        return b"".join(self._chunks).decode(errors="replace")


def run_on_terminal(
    *args: str, env: dict[str, str], terminal: Terminal, stdin: str | None = None
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run the CLI with stderr on the terminal, and stdin too unless ``stdin`` text is given."""
    if not interpreter_agrees(env):
        process = subprocess.Popen(
            [sys.executable, "-m", "cloudqueue", *args],
            stdin=terminal.slave if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=terminal.slave,
            env=env,
            text=True,
        )
        stdout, _ = process.communicate(stdin, timeout=60)
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout, "")
        return result, terminal.output()
    result = run_forked(
        list(args),
        env=env,
        stdin=stdin,
        cwd=Path.cwd(),
        timeout_s=60,
        terminal=os.ttyname(terminal.slave),
    )
    return result, terminal.output()
