"""The README's quick start works as written: its blocks run in a fresh copy of the repository.

Each block the quick start asks a newcomer to run is marked ``<!-- quickstart:NAME -->``; this
test extracts them by name and runs them, in order, the way a person would: install and demo,
write the first worker, enqueue, run it (Ctrl-C to stop), look at its status, switch stores.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cloudqueue.listener.stores.connection import AzureTarget, parse_connection_string
from tests.support.paths import REPO_ROOT
from tests.support.polling import eventually

MARKED_BLOCK = re.compile(
    r"<!-- quickstart:(?P<name>[\w-]+)(?: (?P<argument>\S+))? -->\n"
    r"```(?P<language>\w+)\n(?P<code>.*?)```",
    re.DOTALL,
)
EXPECTED_BLOCKS = ["demo", "tests", "worker-file", "enqueue", "run", "status", "azure"]


@dataclass(frozen=True)
class Block:
    name: str
    argument: str | None
    language: str
    code: str


def quick_start_blocks() -> dict[str, Block]:
    readme = (REPO_ROOT / "README.md").read_text()
    return {
        match["name"]: Block(match["name"], match["argument"], match["language"], match["code"])
        for match in MARKED_BLOCK.finditer(readme)
    }


def fresh_copy(destination: Path) -> Path:
    """The repository's files as a clone has them: tracked and new, nothing ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def newcomer_environment() -> dict[str, str]:
    """A shell without this test run's settings or virtual environment."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CLOUDQUEUE_", "VIRTUAL_ENV", "PYTHON"))
    }


def shell(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-e", "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )


def test_the_quick_start_marks_every_step_a_newcomer_runs() -> None:
    """Every step has its marked block, in the order a newcomer meets them."""
    assert list(quick_start_blocks()) == EXPECTED_BLOCKS


def test_the_second_quick_start_command_is_what_ci_runs() -> None:
    """`.ci/run` runs exactly the README's test command."""
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert quick_start_blocks()["tests"].code.strip() in ci


def test_the_quick_start_and_first_worker_run_as_written_in_a_fresh_copy(
    tmp_path: Path,
) -> None:
    """Install and demo, then write, feed, run, watch and stop the first worker."""
    blocks = quick_start_blocks()
    clone = fresh_copy(tmp_path / "cloudqueue")
    env = newcomer_environment()

    demo = shell(blocks["demo"].code, clone, env)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert '"event": "demo_finished"' in demo.stderr

    worker_file = blocks["worker-file"]
    assert worker_file.argument is not None
    (clone / worker_file.argument).write_text(worker_file.code)
    enqueued = shell(blocks["enqueue"].code, clone, env)
    assert enqueued.returncode == 0, enqueued.stderr[-3000:]

    printed = tmp_path / "worker.out"
    with printed.open("w") as output:
        worker = subprocess.Popen(
            ["bash", "-e", "-c", blocks["run"].code],
            cwd=clone,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        eventually(
            lambda: {"hello, Ada", "hello, Grace"} <= set(printed.read_text().splitlines()),
            timeout_s=60,
        )
        status = shell(blocks["status"].code, clone, env)
        assert status.returncode == 0, status.stderr[-3000:]
        assert "greetings" in status.stdout
        assert "HelloWorker" in status.stdout  # the running worker, from its live state
    finally:
        os.killpg(worker.pid, signal.SIGINT)  # Ctrl-C
        stopped = worker.wait(timeout=60)
    assert stopped == 0, printed.read_text()[-3000:]

    (assignment,) = re.findall(r'CLOUDQUEUE_CONNECTION_STRING="([^"]+)"', blocks["azure"].code)
    target = parse_connection_string(assignment)
    assert isinstance(target, AzureTarget)
    assert "127.0.0.1:10001" in target.description  # Azurite's default queue endpoint
