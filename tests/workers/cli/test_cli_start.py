"""A command imports what it uses: ``--version`` and ``--help`` import no command; ``enqueue``
and the other commands that only read settings and storage none of the host, the consumer,
Redis, the Azure SDK or prometheus; ``run`` neither Redis nor prometheus unless settings ask.

What a process imported is read from ``PYTHONPROFILEIMPORTTIME`` (every module, once, on stderr),
so these tests hold the structure, not a speed; ``tests/benchmarks/bench_cli_start.py`` measures
the time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from cloudqueue.listener.stores.sqlite_storage import SqliteQueueStorage
from cloudqueue.workers.cli import COMMANDS, CloudQueueGroup, cli
from tests.support.cli import cloudqueue, plain

LIBRARIES = ("azure", "redis", "prometheus_client", "reactivex", "psutil")
SETTINGS_AND_LOGS = ("pydantic", "pydantic_settings", "structlog", "rich")
NOT_FOR_VERSION = (*LIBRARIES, *SETTINGS_AND_LOGS, "cloudqueue.workers.settings")
NOT_FOR_ENQUEUE = (
    *LIBRARIES,
    "cloudqueue.workers.host.host",
    "cloudqueue.workers.api",
    "cloudqueue.listener.consumer.listener",
    "cloudqueue.listener.scaling",
)


def imported_by(*args: str, env: dict[str, str] | None = None) -> tuple[str, set[str]]:
    """What ``cloudqueue ARGS`` printed, and every module its process imported."""
    done = cloudqueue(*args, env={**(env or os.environ), "PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    modules = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return done.stdout, modules


def among(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    """The modules that are, or are inside, one of ``packages``."""
    return sorted(m for m in modules if any(m == p or m.startswith(f"{p}.") for p in packages))


def test_version_imports_no_command_and_no_library() -> None:
    """``cloudqueue --version`` prints the version, importing click and the group, no more."""
    shown, modules = imported_by("--version")
    assert shown.startswith("cloudqueue, version ")
    assert among(modules, NOT_FOR_VERSION) == []
    assert among(modules, ("cloudqueue.workers.cli",)) == [
        "cloudqueue.workers.cli",
        "cloudqueue.workers.cli.config_option",
        "cloudqueue.workers.cli.lazy_group",
    ]


def test_help_lists_every_command_with_its_summary_without_importing_them() -> None:
    """``cloudqueue --help`` names every command and its one line, from the lazy registry."""
    shown, modules = imported_by("--help")
    for name in COMMANDS:
        assert f"  {name} " in shown
    assert "Run workers and periodic jobs" in shown
    assert among(modules, NOT_FOR_VERSION) == []


def test_enqueue_on_sqlite_imports_neither_host_nor_azure_nor_redis(tmp_path: Path) -> None:
    """``cloudqueue enqueue`` reads settings and puts; the worker side stays unimported."""
    env = {**os.environ, "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}"}
    shown, modules = imported_by("enqueue", "invoices", '{"invoice_id": 1}', env=env)
    assert shown.startswith("enqueued 1 item(s) on invoices")
    assert among(modules, NOT_FOR_ENQUEUE) == []


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (("queues", "list"), "invoices"),
        (("status", "invoices"), "invoices"),
        (("poison", "list", "invoices"), "invoices-poison"),
        (("config", "show"), "connection_string = "),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else "",
)
def test_commands_that_read_storage_or_settings_import_no_worker_side(
    tmp_path: Path, args: tuple[str, ...], shown: str
) -> None:
    """Listing, status, the poison queue and ``config show`` read files, settings and storage:
    like ``enqueue`` they import neither the host nor the consumer (a listener's whole loop)."""
    storage = SqliteQueueStorage(str(tmp_path / "q.db"))
    storage.create_queue("invoices")
    storage.create_queue("invoices-poison")
    storage.close()
    env = {**os.environ, "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}"}
    output, modules = imported_by(*args, env=env)
    assert shown in output
    assert among(modules, NOT_FOR_ENQUEUE) == []


def test_run_imports_redis_and_prometheus_only_when_the_settings_ask_for_them() -> None:
    """Every ``cloudqueue run`` (and each ``--processes`` child) imports the run command and the
    host; the Redis client (with the telemetry it imports) waits for triggers or limits URLs, and
    prometheus_client for a metrics port."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import cloudqueue.workers.cli.run"],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = {line.rpartition("|")[2].strip() for line in done.stderr.splitlines()}
    assert "cloudqueue.workers.host.host" in modules
    assert among(modules, ("redis", "opentelemetry", "prometheus_client")) == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_the_short_help_of_its_command(name: str) -> None:
    """The registry's one line is what click would list for the command itself, so ``--help``
    reads the same as if every command had been imported."""
    command = COMMANDS[name].load()
    assert COMMANDS[name].summary == command.get_short_help_str(limit=1000)


def help_of(group: click.Group) -> str:
    with click.Context(group, info_name="cloudqueue") as context:
        return group.get_help(context)


def test_the_command_list_reads_as_clicks_own() -> None:
    """With no command imported, ``--help`` lists them as click lists imported ones."""
    lazy = CloudQueueGroup(help=cli.help, params=cli.params, lazy_commands=COMMANDS)
    eager = click.Group(help=cli.help, params=cli.params)
    for name, command in COMMANDS.items():
        eager.add_command(command.load(), name)
    assert help_of(lazy) == help_of(eager)
    assert lazy.commands == {}


def test_a_misspelt_command_still_gets_a_suggestion() -> None:
    """Suggestions come from every command, imported or not."""
    done = cloudqueue("enqeue", "q", env=dict(os.environ))
    assert done.returncode == 2
    assert "No such command 'enqeue'. (Did you mean one of: 'enqueue'" in plain(done.stderr)
