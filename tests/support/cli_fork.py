"""``cloudqueue`` commands forked from a warm fork server: a process each, without the imports.

Starting ``python -m cloudqueue`` costs an interpreter and about 2 s of imports under the
suite's load, for commands that then work for a tenth of that. ``multiprocessing``'s fork server
is a single-threaded process that imports ``tests.support.cli_warm`` once (per test worker) and
forks a child for each command; forking the test process itself would not be safe, as it runs
threads. The child takes the command's environment, working directory and standard streams
(files here, read back by the parent), runs ``cloudqueue`` as ``python -m`` would, runs the exit
handlers, and exits with the command's code.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Protocol

SERVER = multiprocessing.get_context("forkserver")
SERVER.set_forkserver_preload(["tests.support.cli_warm"])


def interpreter_agrees(env: dict[str, str]) -> bool:
    """Whether ``env`` sets the ``PYTHON*`` variables as this process has them (they act only
    when an interpreter starts, so a command run with others needs a new one)."""

    def python_variables(variables: dict[str, str]) -> dict[str, str]:
        return {name: value for name, value in variables.items() if name.startswith("PYTHON")}

    return python_variables(env) == python_variables(dict(os.environ))


def run_forked(
    args: list[str],
    *,
    env: dict[str, str],
    stdin: str | None,
    cwd: Path,
    timeout_s: float,
    terminal: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cloudqueue ARGS`` in a child of the fork server and return what it did.

    With ``terminal`` (a pseudo-terminal's device), stderr goes to it, and stdin too when
    ``stdin`` is None; the child opens the device by name, as descriptors do not cross to it.
    """
    with tempfile.TemporaryDirectory(prefix="cloudqueue-cli-") as folder:
        stdin_file, stdout_file, stderr_file = (
            Path(folder, name) for name in ("stdin", "stdout", "stderr")
        )
        stdin_file.write_text(stdin or "")
        streams = (
            str(stdin_file) if stdin is not None or terminal is None else terminal,
            str(stdout_file),
            terminal or str(stderr_file),
        )
        child = SERVER.Process(target=_command, args=(args, env, str(cwd), *streams))
        child.start()
        child.join(timeout_s)
        if child.is_alive():
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(["cloudqueue", *args], timeout_s)
        return subprocess.CompletedProcess(
            ["cloudqueue", *args],
            child.exitcode if child.exitcode is not None else -1,
            stdout_file.read_text(errors="replace"),
            "" if terminal else stderr_file.read_text(errors="replace"),
        )


class RunningProcess(Protocol):
    """What tests do with a started process, whether ``subprocess.Popen`` or ``ForkedProcess``."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


class ForkedProcess:
    """A long-running ``cloudqueue`` forked from the server, used as a ``subprocess.Popen`` is:
    ``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``, ``returncode``."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        module: str = "cloudqueue",
    ) -> None:
        self.args = [module, *args]
        log_path.touch()  # there from the start, as with a Popen writing to it
        self._child = SERVER.Process(
            target=_command,
            args=(args, env, str(cwd), os.devnull, str(log_path), str(log_path), True, module),
        )
        self._child.start()
        self.pid: int = self._child.pid or 0

    @property
    def returncode(self) -> int | None:
        return self._child.exitcode

    def poll(self) -> int | None:
        return self._child.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._child.join(timeout)
        if self._child.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._child.exitcode

    def send_signal(self, signum: int) -> None:
        if self._child.exitcode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _command(
    args: list[str],
    env: dict[str, str],
    cwd: str,
    stdin: str,
    stdout: str,
    stderr: str,
    new_session: bool = False,
    module: str = "cloudqueue",
) -> None:
    """In the child: become ``python -m MODULE ARGS`` run in ``cwd`` with ``env``."""
    if new_session:
        os.setsid()
    _redirect(stdin, stdout, stderr)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path[0] = cwd  # what ``python -m`` puts first: the working directory
    importlib.invalidate_caches()  # modules written since the server started
    sys.argv = [module, *args]
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _redirect(stdin: str, stdout: str, stderr: str) -> None:
    for fd, path in ((0, stdin), (1, stdout), (2, stderr)):
        if path.startswith("/dev/"):  # a pseudo-terminal, not made the controlling one
            flags = os.O_RDWR | os.O_NOCTTY
        else:
            flags = os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_CREAT | os.O_APPEND
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    # The streams live as long as the process, as the interpreter's own do.
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(  # noqa: SIM115
        2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
    )


def _exit_code(code: object) -> int:
    """What the interpreter makes of ``SystemExit(code)``: None is 0, a message is printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
