"""Debian's Chromium for the browser tests, installed with apt on first use (as root).

Playwright's own browser download is not reachable from CI; Debian's ``chromium`` package is, so
the fixture installs it when ``/usr/bin/chromium`` is missing, the way the Azurite fixture
installs Azurite with npm. A machine where that cannot happen (not root, no apt) fails loudly:
skipping would let CI pass without ever opening the dashboard in a browser.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
INSTALL_TIMEOUT_S = 900.0
LOCK_FILE = Path("/tmp/cloudqueue-chromium-install.lock")

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Headless, no sandbox (CI runs as root), and no traffic of its own beyond the tested page."""


class ChromiumError(RuntimeError):
    """Chromium is missing and could not be installed."""


def ensure_chromium() -> Path:
    """The Chromium executable, installed with ``apt-get install chromium`` if it is missing.

    A file lock serialises installs: parallel test sessions wait for the first one.
    """
    if CHROMIUM.exists():
        return CHROMIUM
    with LOCK_FILE.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not CHROMIUM.exists():
            _apt_install()
    return CHROMIUM


def _apt_install() -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ChromiumError(
            f"{CHROMIUM} is needed for the dashboard's browser test: install Debian's chromium "
            "(`apt-get install -y chromium`), or run the tests as root so that they install it"
        )
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "chromium"]
    result = _run(install, environment)
    if result.returncode != 0:  # a fresh machine has no package lists yet
        _run(["apt-get", "update"], environment)
        result = _run(install, environment)
    if result.returncode != 0 or not CHROMIUM.exists():
        raise ChromiumError(
            f"`{' '.join(install)}` failed with exit code {result.returncode}:\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )


def _run(command: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        env=environment,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
