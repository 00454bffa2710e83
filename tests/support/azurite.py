"""Azurite, the official Azure Storage emulator, as a process tests and benchmarks can start.

``AzuriteProcess`` installs the pinned Azurite from npm into the repository's ignored ``.azurite/``
folder on first use, starts the queue service (and the blob and table services when asked) on
free loopback ports, and stops it again. A stopped instance restarts on the same ports, so a test
can take storage away and bring it back; with ``location`` the queues survive the restart.

As a pytest plugin (``pytest_plugins = ["tests.support.azurite"]``) it provides the session-scoped
``azurite``, ``azurite_with_blobs``, ``azurite_with_tables`` and ``azurite_connection_string``
fixtures and the function-scoped ``azurite_factory``.
A machine without npm fails these tests loudly: skipping would let CI pass without ever touching
the Azure backend.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import pytest

AZURITE_VERSION = "3.37.0"
ACCOUNT_NAME = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""The emulator's published, well-known development account: not a secret."""

HOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600.0
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.05


class AzuriteError(RuntimeError):
    """Azurite could not be installed or started."""


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _another_free_port(*taken: int) -> int:
    port = free_port()
    while port in taken:
        port = free_port()
    return port


def port_accepts(port: int) -> bool:
    """True when something accepts TCP connections on the loopback port."""
    try:
        with socket.create_connection((HOST, port), timeout=POLL_INTERVAL_S * 4):
            return True
    except OSError:
        return False


def ensure_installed(root: Path) -> Path:
    """Install the pinned Azurite under ``root/.azurite`` unless it is there; return its bin dir.

    An exclusive file lock serialises installs, so parallel test sessions sharing a checkout wait
    for the first one instead of running two npm installs into the same folder.
    """
    prefix = root / ".azurite"
    bin_dir = prefix / "node_modules" / ".bin"
    prefix.mkdir(parents=True, exist_ok=True)
    with (prefix / "install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed_version(prefix) != AZURITE_VERSION or not (bin_dir / "azurite-queue").exists():
            _npm_install(prefix)
    return bin_dir


def installed_version(prefix: Path) -> str | None:
    """The version of Azurite installed under the prefix, if any."""
    manifest = prefix / "node_modules" / "azurite" / "package.json"
    try:
        version = json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return str(version)


def _npm_install(prefix: Path) -> None:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise AzuriteError(
            "node and npm are needed to run Azurite for the Azure Storage tests, and were not "
            "found on PATH: install Node.js 20+ with npm (e.g. `apt-get install nodejs npm`)"
        )
    command = [npm, "install", "--prefix", str(prefix), f"azurite@{AZURITE_VERSION}"]
    result = subprocess.run(
        [*command, "--no-audit", "--no-fund"],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        raise AzuriteError(
            f"`{' '.join(command)}` failed with exit code {result.returncode}:\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )


@dataclass
class _Service:
    """One Azurite service (queue or blob): its executable, port and running process."""

    name: str
    port: int
    options: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    output: IO[bytes] | None = field(default=None, repr=False)

    def command(self, bin_dir: Path, location: Path | None) -> list[str]:
        storage = ["--location", str(location)] if location else ["--inMemoryPersistence"]
        return [
            str(bin_dir / f"azurite-{self.name}"),
            f"--{self.name}Host",
            HOST,
            f"--{self.name}Port",
            str(self.port),
            *storage,
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--silent",
            *self.options,
        ]

    def start(self, bin_dir: Path, location: Path | None) -> None:
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            self.command(bin_dir, location),
            stdin=subprocess.DEVNULL,
            stdout=self.output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() signals node and its children
        )

    def captured_output(self) -> str:
        if self.output is None:
            return ""
        self.output.seek(0)
        return self.output.read().decode(errors="replace")[-4000:]

    def wait_until_listening(self, deadline: float) -> None:
        """Return once the port accepts connections; raise if Azurite exits or time runs out."""
        assert self.process is not None
        while not port_accepts(self.port):
            try:
                code = self.process.wait(timeout=POLL_INTERVAL_S)
            except subprocess.TimeoutExpired:
                code = None
            if code is not None:
                raise AzuriteError(
                    f"azurite-{self.name} exited with code {code} before listening on port "
                    f"{self.port}:\n{self.captured_output()}"
                )
            if time.monotonic() > deadline:
                raise AzuriteError(
                    f"azurite-{self.name} did not listen on port {self.port} in time:\n"
                    f"{self.captured_output()}"
                )

    def stop(self, timeout_s: float) -> None:
        """Terminate the process group: SIGTERM, then SIGKILL if it outlives the timeout."""
        process, self.process = self.process, None
        if process is not None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
        if self.output is not None:
            self.output.close()
            self.output = None


def _signal_group(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(process.pid, signum)


@dataclass(frozen=True)
class OAuthTls:
    """A certificate and key for Azurite's HTTPS, which its OAuth (bearer token) mode requires."""

    cert: Path
    key: Path

    def options(self) -> list[str]:
        return ["--oauth", "basic", "--cert", str(self.cert), "--key", str(self.key)]


class AzuriteProcess:
    """An Azurite instance on free loopback ports; restarts keep the ports (and, with a location,
    the data). With ``oauth`` it serves HTTPS and accepts Microsoft Entra ID bearer tokens."""

    def __init__(
        self,
        root: Path,
        *,
        blob: bool = False,
        table: bool = False,
        location: Path | None = None,
        oauth: OAuthTls | None = None,
    ) -> None:
        self.root = root
        self.location = location
        self.scheme = "http" if oauth is None else "https"
        options = [] if oauth is None else oauth.options()
        self.queue = _Service("queue", free_port(), options)
        self.blob = _Service("blob", _another_free_port(self.queue.port), options) if blob else None
        self.table = (
            _Service("table", _another_free_port(self.queue.port, *self._blob_port()), options)
            if table
            else None
        )

    def _blob_port(self) -> list[int]:
        return [] if self.blob is None else [self.blob.port]

    @property
    def services(self) -> list[_Service]:
        return [s for s in (self.queue, self.blob, self.table) if s is not None]

    @property
    def running(self) -> bool:
        return all(s.process is not None and s.process.poll() is None for s in self.services)

    @property
    def queue_url(self) -> str:
        """The development account's queue service URL."""
        return f"{self.scheme}://{HOST}:{self.queue.port}/{ACCOUNT_NAME}"

    @property
    def blob_url(self) -> str | None:
        """The development account's blob service URL, when the blob service runs."""
        return (
            None if self.blob is None else f"{self.scheme}://{HOST}:{self.blob.port}/{ACCOUNT_NAME}"
        )

    @property
    def table_url(self) -> str | None:
        """The development account's table service URL, when the table service runs."""
        if self.table is None:
            return None
        return f"{self.scheme}://{HOST}:{self.table.port}/{ACCOUNT_NAME}"

    @property
    def connection_string(self) -> str:
        """A connection string to this instance for the well-known development account."""
        parts = [
            f"DefaultEndpointsProtocol={self.scheme}",
            f"AccountName={ACCOUNT_NAME}",
            f"AccountKey={ACCOUNT_KEY}",
            f"QueueEndpoint={self.queue_url}",
        ]
        if self.blob_url is not None:
            parts.append(f"BlobEndpoint={self.blob_url}")
        if self.table_url is not None:
            parts.append(f"TableEndpoint={self.table_url}")
        return ";".join(parts) + ";"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Install if needed, start every service and wait until each accepts connections."""
        if self.running:
            return
        self.stop()  # whatever is left of a half-dead instance, so its ports are free again
        bin_dir = ensure_installed(self.root)
        if self.location is not None:
            self.location.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        try:
            for service in self.services:
                service.start(bin_dir, self.location)
            for service in self.services:
                service.wait_until_listening(deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop every service; a later start() uses the same ports."""
        for service in self.services:
            service.stop(timeout_s)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        ports = ", ".join(f"{s.name}={s.port}" for s in self.services)
        return f"AzuriteProcess({ports}, running={self.running}, location={self.location})"


AzuriteFactory = Callable[..., AzuriteProcess]


@pytest.fixture(scope="session")
def azurite() -> Iterator[AzuriteProcess]:
    """One in-memory Azurite queue service for the whole test session."""
    with AzuriteProcess(REPO_ROOT) as process:
        yield process


@pytest.fixture(scope="session")
def azurite_with_blobs() -> Iterator[AzuriteProcess]:
    """An in-memory Azurite serving queues and blobs (ledgers, payloads), for the whole session."""
    with AzuriteProcess(REPO_ROOT, blob=True) as process:
        yield process


@pytest.fixture(scope="session")
def azurite_with_tables() -> Iterator[AzuriteProcess]:
    """An in-memory Azurite serving queues and tables, for the whole test session."""
    with AzuriteProcess(REPO_ROOT, table=True) as process:
        yield process


@pytest.fixture(scope="session")
def azurite_connection_string(azurite: AzuriteProcess) -> str:
    """The connection string of the session's Azurite."""
    return azurite.connection_string


@pytest.fixture
def azurite_factory() -> Iterator[AzuriteFactory]:
    """Starts extra Azurite instances (e.g. ``location=tmp_path``) that the test may stop and
    restart at will; all are stopped when the test ends."""
    started: list[AzuriteProcess] = []

    def start(
        *, blob: bool = False, table: bool = False, location: Path | None = None
    ) -> AzuriteProcess:
        process = AzuriteProcess(REPO_ROOT, blob=blob, table=table, location=location)
        started.append(process)
        process.start()
        return process

    yield start
    for process in started:
        process.stop()
