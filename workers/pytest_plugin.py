"""cloudqueue's pytest plugin, registered by the package (``pytest11`` entry point).

Installing cloudqueue gives every test suite two fixtures for testing workers without Azure or
real time; ``cloudqueue.workers.testing.run_until_drained`` is the helper that uses them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cloudqueue.listener.stores.memory_storage import InMemoryQueueStorage
from cloudqueue.listener.testing import VirtualClock


@pytest.fixture
def cloudqueue_clock() -> VirtualClock:
    """Virtual time: it moves only when the test (or ``run_until_drained``) moves it."""
    return VirtualClock()


@pytest.fixture
def cloudqueue_storage(cloudqueue_clock: VirtualClock) -> Iterator[InMemoryQueueStorage]:
    """An empty in-memory queue store on ``cloudqueue_clock``."""
    storage = InMemoryQueueStorage(clock=cloudqueue_clock)
    yield storage
    storage.close()
