"""The public surface is what __all__ says, and every name in it exists."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["listener", "workers"])
def test_all_names_exist_and_are_sorted(package: str) -> None:
    """Every exported name resolves; the list is kept sorted so changes are easy to review."""
    module = importlib.import_module(package)
    assert all(hasattr(module, name) for name in module.__all__)
    assert list(module.__all__) == sorted(module.__all__, key=lambda n: (not n.isupper(), n))


def test_the_core_names_are_public() -> None:
    """The names users build on are importable from the package roots."""
    import listener
    import workers

    for name in [
        "CloudQueueListener",
        "CloudQueueListenerInfo",
        "CloudQueueLocation",
        "QueueStorage",
        "InMemoryQueueStorage",
        "SqliteQueueStorage",
        "current_envelope",
    ]:
        assert name in listener.__all__
    assert "QueueWorker" in workers.__all__
