"""``keep_results`` and ``results_ttl_s`` are checked when a worker loads: a time to live that is
no positive finite number, a ``keep_results`` that is no bool, and results of a batch handler are
refused in one line, and ``cloudqueue run`` exits 2 with it before touching a queue; ``send``
makes a key only where the worker keeps results and gives none itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cloudqueue.listener import ConfigurationError, InMemoryQueueStorage
from cloudqueue.workers import QueueWorker
from cloudqueue.workers.api.result_handles import key_to_send, result_handle
from tests.support.cli import cloudqueue
from tests.support.result_workers import BatchPricer, NeverExpiring, Price, Pricer


def test_a_bad_time_to_live_or_a_batch_handler_is_refused_naming_the_worker() -> None:
    """Each raises ConfigurationError naming the worker and what is wrong."""
    with pytest.raises(ConfigurationError, match=r"'NeverExpiring': results_ttl_s: .*finite"):
        NeverExpiring.check()
    with pytest.raises(ConfigurationError, match=r"'BatchPricer': keep_results needs handle"):
        BatchPricer.check()

    class Unsure(Pricer):
        keep_results = "yes"  # type: ignore[assignment]

    with pytest.raises(ConfigurationError, match=r"keep_results must be True or False"):
        Unsure.check()
    Pricer.check()  # the good one loads


@pytest.mark.parametrize(
    ("target", "shown"),
    [("NeverExpiring", "results_ttl_s"), ("BatchPricer", "keep_results needs handle")],
)
def test_cloudqueue_run_exits_2_with_one_line(tmp_path: Path, target: str, shown: str) -> None:
    """The command stops before any queue exists, with exit code 2 and one line saying why."""
    env = {**os.environ, "CLOUDQUEUE_CONNECTION_STRING": f"sqlite:///{tmp_path / 'q.db'}"}
    result = cloudqueue("run", f"tests.support.result_workers:{target}", env=env)
    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert shown in line
    assert not (tmp_path / "q.db").exists()


def test_a_key_is_made_only_where_results_are_kept_and_the_worker_gives_none() -> None:
    """``send`` without a key makes one for a worker that keeps results; a worker that keeps
    none, or gives keys itself (``key(item)``), gets the caller's key (None), and its handle's
    ``result`` says why it cannot wait."""

    class Keyed(Pricer):
        def key(self, item: Price) -> str:
            return item.sku

    class Plain(QueueWorker[Price]):
        queue_name = "prices"

        def handle(self, item: Price) -> None:
            return None

    made = key_to_send(Pricer, None)
    assert made is not None
    assert len(made) == 32
    assert key_to_send(Pricer, "mine") == "mine"
    assert key_to_send(Keyed, None) is None
    assert key_to_send(Plain, None) is None
    storage = InMemoryQueueStorage()
    with pytest.raises(ValueError, match=r"gives its messages keys .*key=\.\.\."):
        result_handle(Keyed, None, storage, None).result(timeout_s=1)
    with pytest.raises(ValueError, match="Plain keeps no results: set keep_results = True"):
        result_handle(Plain, "k", storage, None).result(timeout_s=1)
