"""The supervisor and a child whose ``startup`` failed (``STARTUP_FAILED_EXIT_CODE``): never
restarted in a loop; the fleet stops with that code, or under ``--reload`` the child waits for
the next source change. The children are real processes exiting with that code."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from structlog.testing import capture_logs

from cloudqueue.workers.fleet.supervisor import Supervisor
from cloudqueue.workers.host.child_slot import STARTUP_FAILED_EXIT_CODE
from tests.support.polling import eventually

FAILS_AT_STARTUP = [sys.executable, "-c", f"raise SystemExit({STARTUP_FAILED_EXIT_CODE})"]


def started(logs: Sequence[Mapping[str, Any]]) -> int:
    return sum(1 for event in logs if event["event"] == "child_started")


def test_a_child_whose_startup_failed_stops_the_fleet_with_its_exit_code() -> None:
    """Two children, each started once: none restarted, the supervisor exits 4."""
    supervisor = Supervisor(FAILS_AT_STARTUP, 2, grace_s=1)
    with capture_logs() as logs:
        code = supervisor.run()
    assert code == STARTUP_FAILED_EXIT_CODE
    assert started(logs) == 2
    assert any(event["event"] == "child_startup_failed" for event in logs)


def test_under_reload_a_child_whose_startup_failed_waits_for_the_next_change() -> None:
    """Held, not restarted, until ``restart`` (a source change); SIGTERM then ends the parent,
    which exits non-zero."""
    supervisor = Supervisor(FAILS_AT_STARTUP, 1, grace_s=1, wait_for_restart=True)
    with capture_logs() as logs:

        def change_then_stop() -> None:
            eventually(lambda: any(e["event"] == "child_startup_failed" for e in logs))
            assert started(logs) == 1
            supervisor.restart()
            eventually(lambda: started(logs) == 2)
            os.kill(os.getpid(), signal.SIGTERM)  # to run()'s handler on the main thread

        control = threading.Thread(target=change_then_stop)
        control.start()
        code = supervisor.run()
        control.join(10)
    assert code != 0
    assert started(logs) == 2
