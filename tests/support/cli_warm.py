"""Imported once by the CLI runner's fork server, so that each ``cloudqueue`` it starts begins warm.

A ``cloudqueue`` subprocess spends most of its time importing (pydantic-settings, structlog, the
Azure SDK, the command's own modules): under the suite's load about 2 s of wall time for 0.2 s
of work. The fork server (``tests.support.cli``) imports this module once per test worker and
forks each command from it; the command still runs in a process of its own, with its own
environment, working directory, standard streams and exit code.
"""

from __future__ import annotations

import importlib

import azure.storage.blob
import azure.storage.queue

import cloudqueue.workers.settings
from cloudqueue.workers.cli import COMMANDS

for lazy in COMMANDS.values():
    importlib.import_module(lazy.path.partition(":")[0])

__all__ = ["azure", "cloudqueue"]
