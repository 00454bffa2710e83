"""``cloudqueue run --processes N``: N worker processes under one parent.

Python threads share one interpreter lock, so CPU-bound handlers need processes. The parent
starts N children running the same workers, restarts a child that dies (with a randomized
exponential back-off, so a child that crashes at start-up cannot spin; at once when it asked to be
recycled, ``RECYCLE_EXIT_CODE``), and forwards SIGTERM and
SIGINT: the first drains every child, a second makes them exit at once. It touches no queue.
A child whose worker's ``startup`` raised (``STARTUP_FAILED_EXIT_CODE``) is not restarted: it
would fail the same way, so the supervisor drains the others and exits with that code, for the
orchestrator to see (and back off on) -- except under ``--reload``, where it waits for the fix.
``restart`` (asked by ``cloudqueue run --reload`` when the source changes) drains every child and
starts it again, from the main loop, so a restart is never mistaken for a crash.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.policies.backoff import randomized_exponential_backoff
from cloudqueue.workers.host.child_slot import (
    CHILD_SLOT_VARIABLE,
    RECYCLE_EXIT_CODE,
    STARTUP_FAILED_EXIT_CODE,
)
from cloudqueue.workers.host.signal_latch import SignalLatch

log = structlog.get_logger(__name__)

STABLE_AFTER_S = 60.0
"""A child that ran this long before dying is restarted without back-off."""
POLL_INTERVAL_S = 0.5
MAX_RESTART_DELAY_S = 30.0


@dataclass
class Child:
    """One worker process slot: its current process and its crash history."""

    slot: int
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    crashes: int = 0
    restart_at: float | None = None


class ChildObserver(Protocol):
    """Told what happens to the children (the metrics endpoint serving them all)."""

    def child_exited(self, pid: int) -> None: ...

    def draining(self) -> None: ...


class Supervisor:
    """Keeps ``processes`` copies of ``command`` running until told to stop."""

    def __init__(
        self,
        command: list[str],
        processes: int,
        *,
        grace_s: float,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        child_env: Mapping[str, str] | None = None,
        observer: ChildObserver | None = None,
        wait_for_restart: bool = False,
    ) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self.command = command
        self.grace_s = grace_s
        self.clock = clock
        self.rng = rng or random.Random()
        self.children = [Child(slot) for slot in range(processes)]
        self.child_env = dict(child_env or {})
        self.observer = observer
        self.wait_for_restart = wait_for_restart
        """On a failed startup, keep the child stopped until ``restart`` (``--reload``)."""
        self.startup_failed = False
        self._shutdown = threading.Event()
        self._restart = threading.Event()

    def restart(self) -> None:
        """Drain every child and start it again (from any thread; done by the main loop)."""
        self._restart.set()

    def run(self) -> int:
        """Start the children, keep them alive until a signal, then drain them."""
        with SignalLatch(on_second=self._forward) as signals:
            return self._run_until(signals)

    def _run_until(self, signals: SignalLatch) -> int:
        for child in self.children:
            self._start(child)
        while not signals.wait(POLL_INTERVAL_S) and not self._shutdown.is_set():
            if self._restart.is_set():
                self._restart.clear()
                self._restart_all()
            for child in self.children:
                self._tend(child)
        if signals.first is not None:
            self._on_signal(signals)
        codes = self._drain()
        log.info("supervisor_stopped", exit_codes=codes)
        if self.startup_failed:
            return STARTUP_FAILED_EXIT_CODE
        return 0 if all(code == 0 for code in codes) else 1

    def _restart_all(self) -> None:
        """Stop every child as SIGTERM does (in-flight work drains), then start them afresh."""
        self._forward(signal.SIGTERM)
        log.info("children_restarting", exit_codes=self._drain())
        for child in self.children:
            if not self._shutdown.is_set():
                child.crashes = 0
                self._start(child)

    def _on_signal(self, signals: SignalLatch) -> None:
        """After the first SIGTERM/SIGINT (a second is forwarded from the handler itself)."""
        if self.observer is not None:
            self.observer.draining()
        log.info("supervisor_signal", signal=signals.first, count=len(signals.signals))
        self._forward(signals.signals[0])
        self._shutdown.set()

    def _forward(self, signum: int) -> None:
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                child.process.send_signal(signum)

    def _start(self, child: Child) -> None:
        slot_env = {**os.environ, **self.child_env, CHILD_SLOT_VARIABLE: str(child.slot)}
        child.process = subprocess.Popen(self.command, env=slot_env)
        child.started_at = self.clock.monotonic()
        child.restart_at = None
        log.info("child_started", slot=child.slot, pid=child.process.pid)

    def _tend(self, child: Child) -> None:
        """Notice a dead child and restart it once its back-off has passed."""
        now = self.clock.monotonic()
        if child.restart_at is not None:
            if now >= child.restart_at:
                self._start(child)
            return
        if child.process is None or child.process.poll() is None:
            return
        if self.observer is not None:
            self.observer.child_exited(child.process.pid)
        if child.process.returncode == RECYCLE_EXIT_CODE:
            log.warning("child_recycled", slot=child.slot, pid=child.process.pid)
            child.crashes = 0
            self._start(child)
            return
        if child.process.returncode == STARTUP_FAILED_EXIT_CODE:
            self._startup_failed(child)
            return
        lived = now - child.started_at
        child.crashes = 1 if lived >= STABLE_AFTER_S else child.crashes + 1
        delay = randomized_exponential_backoff(
            child.crashes - 1, delta_s=0.5, min_s=0.0, max_s=MAX_RESTART_DELAY_S, rng=self.rng
        )
        child.restart_at = now + delay
        log.warning(
            "child_exited",
            slot=child.slot,
            pid=child.process.pid,
            exit_code=child.process.returncode,
            lived_s=round(lived, 1),
            restart_in_s=round(delay, 2),
        )

    def _startup_failed(self, child: Child) -> None:
        """Not restarted: the fleet stops (or, waiting for a restart, this child stays down)."""
        child.restart_at = float("inf")  # tended no more; `restart` starts it afresh
        log.error(
            "child_startup_failed",
            slot=child.slot,
            pid=None if child.process is None else child.process.pid,
            restarting="on the next source change" if self.wait_for_restart else "no",
        )
        if not self.wait_for_restart:
            self.startup_failed = True
            self._forward(signal.SIGTERM)
            self._shutdown.set()

    def _drain(self) -> list[int]:
        """Wait for the children to finish their in-flight work; their exit codes."""
        deadline = self.clock.monotonic() + self.grace_s + 5.0
        codes: list[int] = []
        for child in self.children:
            if child.process is None:
                continue
            try:
                codes.append(child.process.wait(max(0.0, deadline - self.clock.monotonic())))
            except subprocess.TimeoutExpired:
                log.error("child_kill", slot=child.slot, pid=child.process.pid)
                child.process.kill()
                codes.append(child.process.wait())
            if self.observer is not None:
                self.observer.child_exited(child.process.pid)
        return codes
