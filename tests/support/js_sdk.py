"""Microsoft's JavaScript Storage Queue SDK as a producer and consumer, for contract tests.

``ensure_js_sdk`` installs the pinned ``@azure/storage-queue`` from npm into the repository's
ignored ``.azurite/js-sdk`` folder on first use (as ``tests.support.azurite`` installs Azurite),
and ``JsQueueClient`` runs ``js/queue_client.mjs`` with it: the SDK's defaults, text as it is,
with base64 done by the script when a test asks for it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.support.azurite import INSTALL_TIMEOUT_S, REPO_ROOT, AzuriteError

JS_SDK_VERSION = "12.32.0"
PREFIX = REPO_ROOT / ".azurite" / "js-sdk"
SCRIPT = Path(__file__).with_name("js") / "queue_client.mjs"
RUN_TIMEOUT_S = 60.0


def ensure_js_sdk() -> Path:
    """The node_modules folder holding the pinned SDK, installed (under a lock) if missing."""
    PREFIX.mkdir(parents=True, exist_ok=True)
    manifest = PREFIX / "node_modules" / "@azure" / "storage-queue" / "package.json"
    with (PREFIX / "install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not manifest.exists() or json.loads(manifest.read_text())["version"] != JS_SDK_VERSION:
            _npm_install()
    return PREFIX / "node_modules"


def _npm_install() -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise AzuriteError("npm is needed to install @azure/storage-queue for the contract tests")
    package = f"@azure/storage-queue@{JS_SDK_VERSION}"
    result = subprocess.run(
        [npm, "install", "--prefix", str(PREFIX), package, "--no-audit", "--no-fund"],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        raise AzuriteError(f"npm install {package} failed:\n{result.stderr[-4000:]}")


class JsQueueClient:
    """Sends and receives JSON documents with the JavaScript SDK, plain or base64."""

    def __init__(self, connection_string: str) -> None:
        self._env = {
            **os.environ,
            "AZURE_STORAGE_CONNECTION_STRING": connection_string,
            "NODE_PATH": str(ensure_js_sdk()),
        }
        # ES modules ignore NODE_PATH: run the script from inside the prefix so imports resolve.
        self._script = PREFIX / SCRIPT.name
        shutil.copyfile(SCRIPT, self._script)

    def send(self, queue_name: str, encoding: str, documents: list[dict[str, Any]]) -> None:
        lines = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents)
        self._run("send", queue_name, encoding, stdin=lines)

    def receive(self, queue_name: str, encoding: str, count: int) -> list[dict[str, Any]]:
        output = self._run("receive", queue_name, encoding, str(count))
        return [json.loads(line) for line in output.splitlines() if line.strip()]

    def _run(self, *args: str, stdin: str = "") -> str:
        result = subprocess.run(
            ["node", str(self._script), *args],
            input=stdin,
            env=self._env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(f"the JavaScript client failed:\n{result.stderr[-4000:]}")
        return result.stdout
