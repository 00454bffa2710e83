"""Bad input through the real command line: exit code 2, one line naming source and field.

Every row runs ``cloudqueue`` in a subprocess, in a project folder that holds a worker module, a
custom scaling rule and config files, as a newcomer's would. None of them starts a worker that
drains anything: each stops at validation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cli import cloudqueue
from tests.support.polling import eventually

WORKERS = """
from cloudqueue.workers import QueueWorker


class W(QueueWorker[str]):
    queue_name = "work"

    def handle(self, item: str) -> None:
        pass


class Misspelt(W):
    settings = {"scaling": {"max_thread": 2}}


class ZeroThreads(W):
    settings = {"scaling": {"min_threads": 0}}


class LongRetry(W):
    settings = {"listener": {"max_retry_delay_s": 8 * 24 * 3600}}


class Tuned(W):
    settings = {"scaling": {"max_threads": 3}}


class NoHandle(QueueWorker[str]):
    queue_name = "work"


class BothHandlers(W):
    def handle_batch(self, items: list[str]) -> None:
        pass


class NotARetry(W):
    retry = (ValueError,)


class Bulk(QueueWorker[str]):
    queue_name = "work"

    def handle_batch(self, items: list[str]) -> None:
        pass


class BatchTooBig(Bulk):
    settings = {"batch": {"max_items": 300}}


class BatchWaitPastLimit(Bulk):
    settings = {"listener": {"time_limit_s": 1}, "batch": {"max_wait_s": 2}}
"""

BAD_RETRY = """
from cloudqueue import QueueWorker, Retry


class R(QueueWorker[str]):
    queue_name = "work"
    retry = Retry(retry_on=(ValueError, 42))

    def handle(self, item: str) -> None:
        pass
"""

RULE = """
def five(load: object) -> int:
    return 5
"""

FILES = {
    "mywork.py": WORKERS,
    "badretry.py": BAD_RETRY,
    "myrule.py": RULE,
    "misspelt_key.toml": "[scaling]\nmax_thread = 4\n",
    "misspelt_section.toml": "[scalling]\nmax_threads = 4\n",
    "broken.toml": "[scaling\nmax_threads = 4\n",
    "too_few.toml": "[scaling]\nmax_threads = 0\n",
    # Packages of optional extras, shadowed as if not installed (PYTHONPATH=shadow).
    **{
        f"shadow/{package}/__init__.py": f"raise ImportError('{package} is not installed')\n"
        for package in ("uvicorn", "matplotlib", "watchfiles")
    },
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with a worker module, a custom rule beside it and some config files."""
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


@pytest.fixture
def env(project: Path) -> dict[str, str]:
    """No CLOUDQUEUE_* from the caller: a fresh SQLite store and state folder in the project."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith("CLOUDQUEUE")}
    return {
        **clean,
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{project / 'queues.db'}",
        "CLOUDQUEUE_STATE_DIR": str(project / "run"),
        "CLOUDQUEUE_LOGGING__FORMAT": "json",
    }


@dataclass(frozen=True)
class BadInput:
    """One row of the table: a command line, extra environment, and what its line must name."""

    args: tuple[str, ...]
    names: tuple[str, ...]
    environment: dict[str, str] = field(default_factory=dict)


QUEUE_COMMANDS = [
    ("queues", "list"),
    ("queues", "create", "work"),
    ("queues", "clear", "work", "--yes"),
    ("queues", "delete", "work", "--yes"),
    ("poison", "list", "work"),
    ("poison", "show", "work", "some-id"),
    ("poison", "requeue", "work", "--yes"),
    ("poison", "purge", "work", "--yes"),
    ("status", "work"),
    ("enqueue", "work", "item"),
    ("run", "mywork:W"),
    ("config", "show"),
]
STORES_COMMANDS = [command for command in QUEUE_COMMANDS if command != ("config", "show")]

ROWS: dict[str, BadInput] = {
    "negative time limit": BadInput(
        ("run", "mywork:W", "--set", "listener.time_limit_s=-1"), ("listener.time_limit_s",)
    ),
    "no stuck thread allowed": BadInput(
        ("run", "mywork:W", "--set", "listener.max_stuck_threads=0"),
        ("listener.max_stuck_threads",),
    ),
    "a Retry naming what is no exception": BadInput(
        ("run", "badretry:R"), ("Retry(retry_on=...)", "exception classes", "42")
    ),
    "a retry that is no Retry": BadInput(
        ("run", "mywork:NotARetry"), ("mywork:NotARetry", "retry must be a workers.Retry")
    ),
    "both handle and handle_batch": BadInput(
        ("run", "mywork:BothHandlers"), ("mywork:BothHandlers", "both handle and handle_batch")
    ),
    "max_items over 256": BadInput(
        ("run", "mywork:BatchTooBig"), ("settings of mywork:BatchTooBig", "batch.max_items")
    ),
    "max_items over 256 by --set": BadInput(
        ("run", "mywork:Bulk", "--set", "batch.max_items=257"), ("batch.max_items", "256")
    ),
    "batch wait not shorter than the time limit": BadInput(
        ("run", "mywork:BatchWaitPastLimit"), ("batch.max_wait_s", "listener.time_limit_s")
    ),
    "--set misspelt key": BadInput(
        ("run", "mywork:W", "--set", "scaling.maxthreads=3"),
        ("--set", "scaling.maxthreads", "did you mean scaling.max_threads?"),
    ),
    "config show --set misspelt key": BadInput(
        ("config", "show", "--set", "scaling.maxthreads=3"),
        ("--set", "scaling.maxthreads", "did you mean scaling.max_threads?"),
    ),
    "TOML misspelt key": BadInput(
        ("--config", "misspelt_key.toml", "run", "mywork:W"),
        ("misspelt_key.toml", "scaling.max_thread", "did you mean scaling.max_threads?"),
    ),
    "TOML misspelt section": BadInput(
        ("--config", "misspelt_section.toml", "config", "show"),
        ("misspelt_section.toml", "scalling.max_threads", "did you mean scaling.max_threads?"),
    ),
    "TOML syntax error": BadInput(
        ("--config", "broken.toml", "queues", "list"),
        ("broken.toml", "line 1", "column 9"),
    ),
    "environment misspelt key": BadInput(
        ("run", "mywork:W"),
        ("CLOUDQUEUE_SCALING__MAXTHREADS", "did you mean scaling.max_threads?"),
        {"CLOUDQUEUE_SCALING__MAXTHREADS": "4"},
    ),
    "environment misspelt section": BadInput(
        ("run", "mywork:W"),
        (
            "CLOUDQUEUE_SCALNG__MAX_THREADS",
            "in the environment",
            "did you mean CLOUDQUEUE_SCALING__MAX_THREADS?",
        ),
        {"CLOUDQUEUE_SCALNG__MAX_THREADS": "4"},
    ),
    "environment misspelt setting": BadInput(
        ("config", "show"),
        ("CLOUDQUEUE_CONECTION_STRING", "did you mean CLOUDQUEUE_CONNECTION_STRING?"),
        {"CLOUDQUEUE_CONECTION_STRING": "memory://"},
    ),
    "misspelt worker class": BadInput(
        ("run", "mywork:Tunde"), ("mywork:Tunde", "did you mean 'mywork:Tuned'?")
    ),
    "misspelt worker module": BadInput(
        ("run", "mywrk:Tuned"), ("mywrk", "did you mean 'mywork:Tuned'?")
    ),
    **{
        f"{' '.join(command)} without the {extra} extra": BadInput(
            command, (f"pip install 'cloudqueue[{extra}]'",), {"PYTHONPATH": "shadow"}
        )
        for command, extra in [
            (("dashboard",), "dashboard"),
            (("simulate", "--idle", "10m", "--plot", "day.png"), "plot"),
            (("run", "--reload", "mywork:W"), "reload"),
        ]
    },
    "worker class misspelt key": BadInput(
        ("run", "mywork:Misspelt"),
        ("settings of mywork:Misspelt", "scaling.max_thread", "did you mean scaling.max_threads?"),
    ),
    "worker class min_threads 0 without triggers": BadInput(
        ("run", "mywork:ZeroThreads"),
        ("settings of mywork:ZeroThreads", "min_threads", "triggers.url"),
    ),
    "worker class retry delay over 7 days": BadInput(
        ("run", "mywork:LongRetry"),
        ("settings of mywork:LongRetry", "listener.max_retry_delay_s"),
    ),
    "config show of a worker class with bad settings": BadInput(
        ("config", "show", "mywork:Misspelt"),
        ("settings of mywork:Misspelt", "scaling.max_thread"),
    ),
    "max_retry_delay_s over 7 days": BadInput(
        ("run", "mywork:W", "--set", "listener.max_retry_delay_s=700000"),
        ("listener.max_retry_delay_s", "604800"),
    ),
    "retry_delay_s over 7 days": BadInput(
        ("run", "mywork:W"),
        ("listener.retry_delay_s", "604800"),
        {"CLOUDQUEUE_LISTENER__RETRY_DELAY_S": "604801"},
    ),
    "worker class without handle": BadInput(
        ("run", "mywork:NoHandle"), ("mywork:NoHandle", "handle")
    ),
    "--config after the subcommand": BadInput(
        ("run", "--config", "too_few.toml", "mywork:W"), ("scaling.max_threads",)
    ),
    "--config after a nested subcommand": BadInput(
        ("queues", "list", "--config", "misspelt_key.toml"), ("misspelt_key.toml",)
    ),
    "sqlite with two slashes": BadInput(
        ("queues", "list"),
        ("connection_string", "three slashes", "four for an absolute path"),
        {"CLOUDQUEUE_CONNECTION_STRING": "sqlite://x.db"},
    ),
    **{
        f"sqlite:/// without a path: {' '.join(command)}": BadInput(
            command,
            ("connection_string", "no path"),
            {"CLOUDQUEUE_CONNECTION_STRING": "sqlite:///"},
        )
        for command in QUEUE_COMMANDS
    },
    **{
        f"sqlite file that cannot be opened: {' '.join(command)}": BadInput(
            command,
            ("cannot", "sqlite /proc/forbidden.db"),
            {"CLOUDQUEUE_CONNECTION_STRING": "sqlite:////proc/forbidden.db"},
        )
        for command in STORES_COMMANDS
    },
    **{
        f"memory:// in a short-lived command: {' '.join(command)}": BadInput(
            command,
            ("memory://", "lost when it exits"),
            {"CLOUDQUEUE_CONNECTION_STRING": "memory://"},
        )
        for command in STORES_COMMANDS
        if command[0] != "run"
    },
}


@pytest.mark.parametrize("row", ROWS.values(), ids=list(ROWS))
def test_bad_input_exits_2_with_one_line_naming_source_and_field(
    row: BadInput, project: Path, env: dict[str, str]
) -> None:
    """Exit code 2, exactly one line on stderr naming where and what, and no traceback."""
    result = cloudqueue(*row.args, env={**env, **row.environment}, cwd=project)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert (result.returncode, len(lines)) == (2, 1), result.stderr
    for name in row.names:
        assert name in lines[0]


def test_config_show_of_a_worker_class_shows_its_own_overrides(
    project: Path, env: dict[str, str]
) -> None:
    """`config show MODULE:CLASS` lists the worker's effective settings, naming its overrides."""
    result = cloudqueue("config", "show", "mywork:Tuned", env=env, cwd=project)
    assert result.returncode == 0, result.stderr
    lines = {line.split(" = ")[0]: line for line in result.stdout.splitlines()}
    assert lines["scaling.max_threads"].split()[2:] == ["3", "#", "settings", "of", "mywork:Tuned"]
    assert lines["scaling.min_threads"].endswith("# default")


def test_config_show_accepts_config_after_the_subcommand(
    project: Path, env: dict[str, str]
) -> None:
    """`cloudqueue config show --config FILE` reads FILE, as `cloudqueue --config FILE` does."""
    (project / "three.toml").write_text("[scaling]\nmax_threads = 3\n")
    result = cloudqueue("config", "show", "--config", "three.toml", "--json", env=env, cwd=project)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)["scaling.max_threads"]
    assert shown == {"value": 3, "source": "toml:three.toml"}


def test_a_custom_rule_beside_the_worker_is_imported(project: Path, env: dict[str, str]) -> None:
    """`--set scaling.rule=myrule:five` finds myrule.py in the working folder, as mywork.py is."""
    result = cloudqueue(
        "config",
        "show",
        "mywork:W",
        "--set",
        "scaling.rule=myrule:five",
        "--json",
        env=env,
        cwd=project,
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)["scaling.rule"]
    assert shown == {"value": "myrule:five", "source": "override"}


def test_version_prints_the_package_version(env: dict[str, str]) -> None:
    """`cloudqueue --version` answers with the installed version."""
    result = cloudqueue("--version", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("cloudqueue, version ")


def test_run_imports_a_custom_rule_beside_the_worker(project: Path, env: dict[str, str]) -> None:
    """`run mywork:W --set scaling.rule=myrule:five` starts in the folder holding both modules.

    With -P, as the console script runs: `python -m` alone would put the working folder on the
    import path before cloudqueue could.
    """
    log_path = project / "run.log"
    command = ["run", "mywork:W", "--set", "scaling.rule=myrule:five"]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-P", "-m", "cloudqueue", *command],
            cwd=project,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        eventually(
            lambda: '"host_started"' in log_path.read_text() or process.poll() is not None,
            timeout_s=30,
        )
        assert process.poll() is None, log_path.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_a_command_says_which_store_it_opened_with_its_absolute_path(
    project: Path, env: dict[str, str]
) -> None:
    """sqlite:///tmp/x.db is relative (three slashes): the log line shows where it really is."""
    relative = {**env, "CLOUDQUEUE_CONNECTION_STRING": "sqlite:///tmp/x.db"}
    result = cloudqueue("queues", "list", env=relative, cwd=project)
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.splitlines()
    assert json.loads(line)["event"] == "store_opened"
    assert json.loads(line)["storage"] == f"sqlite {project / 'tmp' / 'x.db'}"
