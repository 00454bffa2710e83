"""Progress: a running handler's report is kept on its lease, shown while it runs, and written
into its message with the next visibility renewal, at no transaction of its own.

On the in-memory store with a manual clock: the test moves time past half the visibility timeout
and the renewer (which looks at the clock at least once a second) renews.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import datetime

import pytest

from cloudqueue.listener import (
    CloudQueueListener,
    CloudQueueLocation,
    InMemoryQueueStorage,
    current_envelope,
)
from cloudqueue.listener.consumer.current import current_message
from cloudqueue.listener.consumer.leases import LeaseKeeper
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.queue_limits import MAX_MESSAGE_BYTES
from cloudqueue.listener.stores.metered import MeteredStorage
from cloudqueue.listener.testing import START, ManualClock
from cloudqueue.listener.wire.envelope import parse_envelope
from cloudqueue.listener.wire.handler_notes import PROGRESS_FIELD
from tests.support.polling import eventually

TIMEOUT_S = 30


class LongHandler:
    """Reports 40 % on its first delivery, then waits to be told to fail; on its second it
    records the progress its message carried, and returns."""

    def __init__(self, metered: MeteredStorage | None = None) -> None:
        self.metered = metered
        self.before_report: Counter[str] = Counter()
        """The store's calls so far, counted just before the report."""
        self.reported = threading.Event()
        self.fail = threading.Event()
        self.carried: list[object] = []

    def __call__(self, item: str) -> None:
        envelope = current_envelope()
        if envelope.dequeue_count == 1:
            if self.metered is not None:
                self.before_report = Counter(self.metered.counts())
            envelope.progress(0.4, "2 of 5 files")
            self.reported.set()
            self.fail.wait(30)
            raise ConnectionError("the job's service went away")
        message = current_message()
        assert message is not None
        fields = parse_envelope(message.content)
        self.carried.append(None if fields is None else fields.fields.get(PROGRESS_FIELD))


@pytest.fixture
def metered(clock: ManualClock, queue_name: str) -> MeteredStorage:
    storage = InMemoryQueueStorage(clock=clock)
    storage.create_queue(queue_name)
    storage.put_message(queue_name, "a long job")
    return MeteredStorage(storage)


@pytest.fixture
def listener(
    metered: MeteredStorage, clock: ManualClock, queue_name: str
) -> Iterator[CloudQueueListener[str]]:
    made: CloudQueueListener[str] = CloudQueueListener(
        metered,
        CloudQueueLocation(queue_name, visibility_timeout_s=TIMEOUT_S),
        str,
        clock=clock,
        sleeper=clock,
        delivery=DeliveryPolicy(retry_delays_s=(0,)),  # a failed message is visible at once
    )
    yield made
    made.stop(timeout_s=5)


def test_progress_rides_the_renewal_and_adds_no_transaction(
    metered: MeteredStorage, clock: ManualClock, listener: CloudQueueListener[str]
) -> None:
    """Between the report and the renewal after it, the only calls besides gets are that
    renewal's one update; the redelivery's text carries the report."""
    handler = LongHandler(metered)
    listener.subscribe(handler)
    listener.start_listener(1)
    assert handler.reported.wait(10)
    before = handler.before_report
    renewals = listener.visibility_renewals
    clock.advance(TIMEOUT_S / 2 + 1)
    eventually(lambda: listener.visibility_renewals > renewals)
    spent = Counter(metered.counts()) - before
    del spent["get_messages"]  # an idle thread's gets, none of the message's own
    assert spent == Counter({"update_visibility": 1})
    handler.fail.set()
    eventually(lambda: listener.messages_processed == 1)
    assert handler.carried == [{"fraction": 0.4, "detail": "2 of 5 files"}]


def test_the_report_is_shown_while_the_handler_runs_and_gone_once_settled(
    clock: ManualClock, listener: CloudQueueListener[str], queue_name: str
) -> None:
    """``progress_reports()`` holds the message's last report until the message is settled."""
    handler = LongHandler()
    listener.subscribe(handler)
    listener.start_listener(1)
    assert handler.reported.wait(10)
    [report] = listener.progress_reports()
    assert (report.queue, report.fraction, report.detail) == (queue_name, 0.4, "2 of 5 files")
    assert report.group is None
    assert START <= datetime.fromisoformat(report.reported_at) <= clock.now()  # its clock
    handler.fail.set()
    eventually(lambda: listener.progress_reports() == [])


@pytest.mark.parametrize(
    ("fraction", "detail"), [(1.5, ""), (-0.1, ""), (float("nan"), ""), (0.5, "a\nb")]
)
def test_a_report_out_of_range_is_one_clear_error(
    fraction: float, detail: str, listener: CloudQueueListener[str]
) -> None:
    """A fraction outside 0..1, or a detail of several lines, raises ValueError."""
    errors: list[str] = []
    done = threading.Event()

    def handle(_: str) -> None:
        try:
            current_envelope().progress(fraction, detail)
        except ValueError as error:
            errors.append(str(error))
        done.set()

    listener.subscribe(handle)
    listener.start_listener(1)
    assert done.wait(10)
    assert len(errors) == 1
    assert "progress" in errors[0]


def test_a_pending_text_too_large_is_dropped_and_the_message_still_renewed(
    clock: ManualClock, queue_name: str
) -> None:
    """Should a pending text not fit, the renewal goes on without it: the message stays hidden
    rather than reappearing while its handler runs."""
    storage = InMemoryQueueStorage(clock=clock)
    storage.create_queue(queue_name)
    storage.put_message(queue_name, "held")
    keeper = LeaseKeeper(storage, queue_name, TIMEOUT_S, clock=clock)
    messages = storage.get_messages(queue_name, max_messages=1, visibility_timeout_s=TIMEOUT_S)
    (lease,) = keeper.hold(messages)
    lease.pending_content = "x" * (MAX_MESSAGE_BYTES + 1)
    try:
        clock.advance(TIMEOUT_S / 2 + 1)
        eventually(lambda: keeper.renewals >= 1)
        clock.advance(TIMEOUT_S / 2 + 1)  # past the fetch's own timeout: renewed, still hidden
        assert lease.pending_content is None
        assert storage.get_messages(queue_name, max_messages=1, visibility_timeout_s=1) == []
    finally:
        keeper.close()
