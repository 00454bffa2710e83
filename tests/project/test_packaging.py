"""What installs is one package, ``cloudqueue``: a user's own ``workers`` or ``listener`` is theirs.

The wheel is built from the working tree and installed into a new virtual environment outside
the repository (its dependencies come from this environment's site-packages through a path
file, so nothing is downloaded), so a mapping that works only inside the repository fails here.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.polling import eventually

USER_WORKER = """
from pathlib import Path

from pydantic import BaseModel

from cloudqueue.workers import QueueWorker
from listener import OUTBOX  # the project's own module named listener


class Email(BaseModel):
    to: str


class SendEmail(QueueWorker[Email]):
    queue_name = "emails"

    def handle(self, item: Email) -> None:
        with Path(OUTBOX).open("a") as outbox:
            outbox.write(item.to + "\\n")
"""


def listed_packages() -> set[str]:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return set(pyproject["tool"]["setuptools"]["packages"])


def test_no_code_imports_the_folders_by_their_repository_names() -> None:
    """Inside the repository ``import listener`` would work (its folder is on the path) and load a
    second copy of every module; only ``cloudqueue.listener`` is the package."""
    stale = []
    for path in sorted(REPO_ROOT.glob("[!.]*/**/*.py")):
        if "build" in path.relative_to(REPO_ROOT).parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            stale += [
                f"{path.relative_to(REPO_ROOT)}:{node.lineno} {name}"
                for name in names
                if name.partition(".")[0] in {"listener", "workers"}
            ]
    assert stale == []


def test_every_package_folder_is_listed_in_pyproject() -> None:
    """A new subpackage that pyproject.toml does not list would be missing from the wheel."""
    folders = {
        "cloudqueue." + ".".join(init.parent.relative_to(REPO_ROOT).parts)
        for top in ("listener", "workers")
        for init in (REPO_ROOT / top).rglob("__init__.py")
        if "cloudqueue" not in init.parent.relative_to(REPO_ROOT).parts
    }
    assert folders | {"cloudqueue"} == listed_packages()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(folder),
            str(REPO_ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [built] = folder.glob("cloudqueue-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with the wheel installed: its ``bin`` folder."""
    environment = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(environment)], check=True)
    python = environment / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", wheel],
        check=True,
        capture_output=True,
        timeout=300,
    )
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # The dependencies, from this environment; a plain path line, so this environment's own
    # path files (the editable install of the repository among them) are not read.
    (Path(site_packages) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return environment / "bin"


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    """Everything the wheel installs is under ``cloudqueue/`` (and its metadata)."""
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"cloudqueue"}


@pytest.fixture
def user_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "workers").mkdir(parents=True)
    (project / "workers" / "__init__.py").write_text("")
    (project / "workers" / "email.py").write_text(USER_WORKER)
    (project / "listener.py").write_text(f"OUTBOX = {str(tmp_path / 'outbox.txt')!r}\n")
    return project


def project_environment(project: Path, installed: Path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDQUEUE_")}
    environment.pop("PYTHONPATH", None)
    database = project / "queues.db"
    return {
        **environment,
        "PATH": f"{installed}{os.pathsep}{environment['PATH']}",
        "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{database}",
    }


def test_the_names_workers_and_listener_are_left_to_the_user(
    installed: Path, user_project: Path
) -> None:
    """Outside the repository, ``import workers`` and ``import listener`` find only the user's."""
    probe = (
        "import workers, listener, cloudqueue.workers; print(workers.__file__, listener.__file__)"
    )
    result = subprocess.run(
        [str(installed / "python"), "-c", probe],
        cwd=user_project,
        env=project_environment(user_project, installed),
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split() == [
        str(user_project / "workers" / "__init__.py"),
        str(user_project / "listener.py"),
    ]
    bare = subprocess.run(
        [str(installed / "python"), "-c", "import workers"],
        cwd=installed,
        env=project_environment(user_project, installed),
        capture_output=True,
        text=True,
        check=False,
    )
    assert "No module named 'workers'" in bare.stderr


def test_a_project_with_its_own_workers_package_runs_its_worker(
    installed: Path, user_project: Path
) -> None:
    """``cloudqueue run workers.email:SendEmail`` handles what was enqueued on the same store,
    and what ``SendEmail.send`` sent from another process with the same environment."""
    environment = project_environment(user_project, installed)
    send = "from workers.email import SendEmail; SendEmail.send({'to': 'e@x.io'})"
    for producer in (
        [str(installed / "cloudqueue"), "enqueue", "emails", '{"to": "d@x.io"}'],
        [str(installed / "python"), "-c", send],
    ):
        subprocess.run(
            producer, cwd=user_project, env=environment, check=True, capture_output=True, timeout=60
        )
    worker = subprocess.Popen(
        [str(installed / "cloudqueue"), "run", "workers.email:SendEmail", "--no-progress"],
        cwd=user_project,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    outbox = user_project.parent / "outbox.txt"
    try:
        eventually(
            lambda: outbox.exists() and sorted(outbox.read_text().split()) == ["d@x.io", "e@x.io"],
            timeout_s=60,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        _, errors = worker.communicate(timeout=60)
    assert worker.returncode == 0, errors[-2000:]
