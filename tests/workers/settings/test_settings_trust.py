"""Which files a command trusts: settings come from data files; code runs only for `run`.

A folder may hold a config/cloudqueue.toml or .env that someone else wrote (a cloned repository,
a shared folder). Reading them is what the working folder is for; importing a module they name
is not, except when running workers, and files another account could have written are refused.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudqueue.workers.cli import cli

PLANTED = """
from pathlib import Path

Path("IMPORTED").write_text("planted code ran")


def rule(load: object) -> int:
    return 1
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a module and a config/cloudqueue.toml naming it as the scaling rule."""
    (tmp_path / "planted.py").write_text(PLANTED)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "cloudqueue.toml").write_text('[scaling]\nrule = "planted:rule"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # whatever a command appends, goes
    monkeypatch.delitem(sys.modules, "planted", raising=False)
    for name in list(os.environ):
        if name.startswith("CLOUDQUEUE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CLOUDQUEUE_CONNECTION_STRING", f"sqlite:///{tmp_path / 'q.db'}")
    return tmp_path


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    "command",
    [
        ("config", "show"),
        ("config", "show", "--json"),
        ("status", "work"),
        ("poison", "list", "work"),
        ("queues", "list"),
    ],
)
def test_inspecting_commands_never_import_a_module_the_settings_name(
    folder: Path, command: tuple[str, ...]
) -> None:
    """config show, status, poison and queues read the rule's name; they never run its module."""
    code, output = invoke(*command)
    assert code in (0, 1), output  # 1: the queue does not exist, which is fine here
    assert not (folder / "IMPORTED").exists()
    assert "planted" not in sys.modules


def test_config_show_prints_the_rule_it_did_not_import(folder: Path) -> None:
    """The rule is shown by name, from the file that set it."""
    code, output = invoke("config", "show")
    assert code == 0, output
    line = next(line for line in output.splitlines() if line.startswith("scaling.rule ="))
    assert line.split() == [
        "scaling.rule",
        "=",
        "'planted:rule'",
        "#",
        "toml:config/cloudqueue.toml",
    ]


def test_a_malformed_rule_name_is_still_refused_without_importing(folder: Path) -> None:
    """`rule = "not a module path:"` fails validation, naming the field, exit code 2."""
    (folder / "config" / "cloudqueue.toml").write_text('[scaling]\nrule = "planted rule:"\n')
    code, output = invoke("config", "show")
    assert code == 2
    assert "scaling.rule" in output


@pytest.mark.parametrize("name", ["config/cloudqueue.toml", ".env"])
def test_a_settings_file_others_may_write_is_refused_unless_named(folder: Path, name: str) -> None:
    """World-writable: exit 2 naming the file; named with --config it is the user's choice."""
    path = folder / name
    if name == ".env":
        path.write_text("CLOUDQUEUE_SCALING__MAX_THREADS=3\n")
    path.chmod(0o666)
    code, output = invoke("config", "show")
    assert code == 2
    assert name in output
    assert "writable by others" in output
    if name == ".env":
        return  # a .env is read from the working folder only; it is never named
    code, output = invoke("--config", name, "config", "show")
    assert code == 0, output


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_a_settings_file_owned_by_another_account_is_refused(folder: Path) -> None:
    """Owned by neither this account nor root: exit 2 naming the file and its owner."""
    os.chown(folder / "config" / "cloudqueue.toml", 4242, 4242)
    code, output = invoke("config", "show")
    assert code == 2
    assert "config/cloudqueue.toml" in output
    assert "4242" in output
