"""cloudqueue: auto-scaling queue listeners for long-lived Python workers on Azure Storage Queues.

This folder is the import root ``cloudqueue``: ``pyproject.toml`` maps it to that name, and the
repository's ``listener/`` and ``workers/`` folders to ``cloudqueue.listener`` and
``cloudqueue.workers``. Nothing else installs at the top level, so a project's own ``workers`` or
``listener`` package never collides with ours.
"""

__all__: list[str] = []
