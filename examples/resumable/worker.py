"""The worker that carries out close-account intents, resuming where a crash left off.

Run it with ``cloudqueue run examples.resumable.worker:CloseAccountWorker``.

For each intent: read the steps already done from the message's checkpoint
(``current_envelope().checkpoint``, None on a first delivery); run every other step, in order,
saving the checkpoint right after each (``save_checkpoint``: written into the message itself, in
the same call that renews its visibility); return, so the listener deletes the message, only
after the last step. If the worker dies, renewals stop, the message reappears after its
visibility timeout carrying its checkpoint, and the next delivery skips the steps it lists. A
step interrupted half-way is run again from its start, and its own idempotence skips the targets
it had done. Only the worker holding the message can save its checkpoint (the update names the
message's newest pop receipt), so a delivery that lost its lease cannot overwrite the state of
the one that has it.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import structlog

from cloudqueue import QueueWorker, current_envelope
from cloudqueue.listener import CloudQueueListener
from examples.resumable.accounts import AccountsDb
from examples.resumable.config import QUEUE, accounts_path, crash_after_step, step_delay_s
from examples.resumable.intent import STEPS, CloseAccount
from examples.resumable.steps import STEP_FUNCTIONS

log = structlog.get_logger(__name__)


class CloseAccountWorker(QueueWorker[CloseAccount]):
    """Closes accounts step by step, exactly once in effect."""

    queue_name = QUEUE

    def __init__(self) -> None:
        self._accounts: AccountsDb | None = None
        self._delay_s = step_delay_s()
        self._crash_after = crash_after_step()

    def on_start(self, listener: CloudQueueListener[Any]) -> None:
        self._accounts = AccountsDb(accounts_path())

    def handle(self, item: CloseAccount) -> None:
        assert self._accounts is not None, "on_start runs before the first item"
        envelope = current_envelope()
        attempt = envelope.dequeue_count
        done: list[str] = list((envelope.checkpoint or {}).get("completed_steps", []))
        for number, step in enumerate(STEPS):
            if step in done:
                log.info("step_skipped", job_id=item.job_id, step=step, attempt=attempt)
                continue
            log.info("step_started", job_id=item.job_id, step=step, attempt=attempt)
            envelope.progress(number / len(STEPS), f"{item.job_id}: {step}")
            changed = STEP_FUNCTIONS[step](self._accounts, item, self._delay_s)
            done.append(step)
            envelope.save_checkpoint({"completed_steps": done})
            log.info("step_done", job_id=item.job_id, step=step, targets_changed=changed)
            if step == self._crash_after:
                log.warning("crashing_on_purpose", job_id=item.job_id, after_step=step)
                os.kill(os.getpid(), signal.SIGKILL)
        log.info("job_finished", job_id=item.job_id, account_id=item.account_id, attempt=attempt)

    def on_stop(self) -> None:
        if self._accounts is not None:
            self._accounts.close()
