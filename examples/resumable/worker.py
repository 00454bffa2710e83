"""The worker that carries out close-account intents, resuming where a crash left off.

Run it with ``cloudqueue run examples.resumable.worker:CloseAccountWorker``.

For each intent: read the job's progress from the state store; run every step not yet recorded
as done, in order, recording each as done (compare-and-set, conflicts retried) right after it;
return, so the listener deletes the message, only after the last step. While a step runs, the
listener renews the message's visibility (every half visibility timeout), so a long job is not
handed to a second worker; if the worker dies, renewals stop, the message reappears after its
visibility timeout, and the next delivery skips the steps already recorded. A step interrupted
half-way is run again from its start, and its own idempotence skips the targets it had done.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import structlog

from cloudqueue import CloudQueueSettings, QueueWorker, current_envelope
from cloudqueue.listener import CloudQueueListener
from examples.resumable.accounts import AccountsDb
from examples.resumable.config import (
    QUEUE,
    accounts_path,
    crash_after_step,
    open_state_store,
    step_delay_s,
)
from examples.resumable.intent import STEPS, CloseAccount
from examples.resumable.state import JobState, StateStore, load_or_create, update
from examples.resumable.steps import STEP_FUNCTIONS

log = structlog.get_logger(__name__)


class CloseAccountWorker(QueueWorker[CloseAccount]):
    """Closes accounts step by step, exactly once in effect."""

    queue_name = QUEUE

    def __init__(self) -> None:
        self._accounts: AccountsDb | None = None
        self._states: StateStore | None = None
        self._delay_s = step_delay_s()
        self._crash_after = crash_after_step()

    def on_start(self, listener: CloudQueueListener[Any]) -> None:
        settings = CloudQueueSettings()
        self._accounts = AccountsDb(accounts_path())
        self._states = open_state_store(settings.connection_string_value())

    def handle(self, item: CloseAccount) -> None:
        assert self._accounts is not None, "on_start runs before the first item"
        assert self._states is not None, "on_start runs before the first item"
        attempt = current_envelope().dequeue_count
        done = load_or_create(self._states, item.job_id).state.completed_steps
        for step in STEPS:
            if step in done:
                log.info("step_skipped", job_id=item.job_id, step=step, attempt=attempt)
                continue
            log.info("step_started", job_id=item.job_id, step=step, attempt=attempt)
            changed = STEP_FUNCTIONS[step](self._accounts, item, self._delay_s)
            update(self._states, item.job_id, _mark_done(step))
            log.info("step_done", job_id=item.job_id, step=step, targets_changed=changed)
            if step == self._crash_after:
                log.warning("crashing_on_purpose", job_id=item.job_id, after_step=step)
                os.kill(os.getpid(), signal.SIGKILL)
        log.info("job_finished", job_id=item.job_id, account_id=item.account_id, attempt=attempt)

    def on_stop(self) -> None:
        for resource in (self._accounts, self._states):
            if resource is not None:
                resource.close()


def _mark_done(step: str) -> Callable[[JobState], JobState]:
    return lambda state: state.with_step_done(step)
