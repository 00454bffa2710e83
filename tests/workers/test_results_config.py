"""``keep_results`` and ``results_ttl_s`` are checked when a worker loads: a time to live that is
no positive finite number, a ``keep_results`` that is no bool, and results of a batch handler are
refused in one line, and ``cloudqueue run`` exits 2 with it before touching a queue."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cloudqueue.listener import ConfigurationError
from tests.support.cli import cloudqueue
from tests.support.result_workers import BatchPricer, NeverExpiring, Pricer


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
