"""Recording members as they settle and sending one ``GroupDone``: the middleware driven message by
message on real stores, with the settlement it predicts and the crash windows it closes (a kill
between recording the last member and publishing, and between publishing and marking it sent);
and a group through a listener of either kind."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cloudqueue.listener import InMemoryQueueStorage, SqliteQueueStorage
from cloudqueue.listener.consumer.events import ListenerStarted
from cloudqueue.listener.consumer.item_failures import ItemFailure
from cloudqueue.listener.consumer.middleware import MessageContext, Outcome, OutcomeKind
from cloudqueue.listener.consumer.wrapping import run_wrapped
from cloudqueue.listener.errors import PermanentFailure, TransientStorageError
from cloudqueue.listener.policies.delivery import DeliveryPolicy
from cloudqueue.listener.producer.publisher import Publisher
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.listener.stores.storage import QueueMessage, QueueStorage
from cloudqueue.listener.testing import ManualClock
from cloudqueue.listener.wire.codec import MessageCodec
from cloudqueue.listener.wire.envelope import parse_envelope
from cloudqueue.listener.wire.frames import unpack
from cloudqueue.listener.workflows.completion import GroupCompletion
from cloudqueue.listener.workflows.group_done import GroupDone
from cloudqueue.listener.workflows.group_ledger import COMPLETION_LEASE_S, GroupLedger
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for
from tests.support.azurite import AzuriteProcess
from tests.support.event_loop_consumer import KINDS, start_either
from tests.support.polling import eventually

POLICY = DeliveryPolicy(max_dequeue_count=3)


class Crash(BaseException):
    """A process killed here: nothing after it runs (not an Exception: nothing catches it)."""


class CrashingPuts:
    """A store whose puts to ``queue`` die, as a process killed before the put returns."""

    def __init__(self, inner: QueueStorage, queue: str) -> None:
        self.inner, self.queue = inner, queue

    def put_message(self, queue_name: str, content: str, **options: Any) -> QueueMessage:
        if queue_name == self.queue:
            raise Crash
        return self.inner.put_message(queue_name, content, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def ledger_of(storage: QueueStorage) -> GroupLedger:
    ledger = group_ledger_for(storage)
    assert ledger is not None
    return ledger


def sent_members(
    storage: QueueStorage, count: int, *, work: str = "work", done: str = "done"
) -> list[QueueMessage]:
    """A group of ``count`` items sent to ``work`` (completion to ``done``), fetched."""
    for queue in (work, done):
        storage.create_queue(queue)
    Publisher(storage, work, dict).send_group([{"n": n} for n in range(count)], on_complete=done)
    return storage.get_messages(work, max_messages=32, visibility_timeout_s=60)


def deliver(
    middleware: GroupCompletion,
    message: QueueMessage,
    *,
    deliveries: int = 1,
    handler: Callable[[MessageContext[Any]], None] | None = None,
    deliverable: bool = True,
    settled: OutcomeKind | None = None,
) -> MessageContext[Any]:
    """One delivery of ``message`` through the middleware; ``handler`` plays the rest of the
    chain (by default: the item was handled), ``settled`` what settlement made of it."""
    context: MessageContext[Any] = MessageContext(
        "work", message, [{}], parse_envelope(message.content), deliveries, deliverable=deliverable
    )

    def call_next() -> None:
        context.handled = True
        if handler is not None:
            handler(context)

    run_wrapped(middleware.around_handle(context, call_next), call_next)
    if settled is not None:
        context.outcome = Outcome(settled)
        middleware.after_settle(context)
    return context


def completions(storage: QueueStorage, done: str = "done") -> list[tuple[GroupDone, str | None]]:
    """The ``GroupDone`` items on ``done``, each with its message key."""
    codec, found = MessageCodec(GroupDone), []
    for message in storage.get_messages(done, max_messages=32, visibility_timeout_s=60):
        envelope = parse_envelope(message.content)
        assert envelope is not None
        assert envelope.packed is not None
        [text] = unpack(envelope.packed)
        found.append((codec.decode(text), envelope.key))
    return found


def failed(error: Exception) -> Callable[[MessageContext[Any]], None]:
    def handler(context: MessageContext[Any]) -> None:
        context.failures = [ItemFailure(0, "{}", "{}", [error])]

    return handler


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "sqlite"])
def storage(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> QueueStorage:
    if request.param == "memory":
        return InMemoryQueueStorage(clock=clock)
    return SqliteQueueStorage(tmp_path / "q.db", clock=clock)


@pytest.mark.parametrize("kind", KINDS)
def test_a_group_through_either_consumer_completes_once_with_its_poisoned_member(
    kind: str,
) -> None:
    """Four members handled by a listener of either kind (on the event loop, the middleware is
    stepped on a worker thread for members: it writes its ledger), one refused with
    ``PermanentFailure``: one ``GroupDone``, 3 handled and 1 poisoned."""
    storage = InMemoryQueueStorage()
    for queue in ("work", "done"):
        storage.create_queue(queue)
    Publisher(storage, "work", dict).send_group([{"n": n} for n in range(4)], on_complete="done")

    def handle(item: dict[str, int]) -> None:
        if item["n"] == 3:
            raise PermanentFailure("refused")

    completion = GroupCompletion(ledger_of(storage), storage, delivery=POLICY)
    listener = start_either(
        kind, storage, "work", handle, middleware=[completion], dequeue_interval_s=0.05
    )
    try:
        eventually(lambda: storage.approximate_message_count("done") == 1)
    finally:
        listener.stop(timeout_s=10)
    [(done, _)] = completions(storage)
    assert (done.handled, done.poisoned) == (3, 1)


def test_on_an_event_loop_only_a_members_steps_leave_the_loop(storage: QueueStorage) -> None:
    """``blocks``: a group member's ledger writes go to a worker thread; a message that is no
    member costs no thread hop."""
    [member] = sent_members(storage, 1)
    plain = storage.put_message("work", '{"n": 1}')
    completion = GroupCompletion(ledger_of(storage), storage, delivery=POLICY)

    def context_of(message: QueueMessage) -> MessageContext[Any]:
        return MessageContext("work", message, [{}], parse_envelope(message.content), 1)

    assert completion.blocks(context_of(member))
    assert not completion.blocks(context_of(plain))


def test_the_last_member_sends_one_group_done_keyed_by_the_group(storage: QueueStorage) -> None:
    """Three members, each delivered twice (a redelivery after its delete failed): one
    ``GroupDone`` with 3 handled, after the third member, its key the group id, announced once."""
    members = sent_members(storage, 3)
    middleware = GroupCompletion(ledger_of(storage), storage, delivery=POLICY)
    announced: list[str] = []
    middleware.announce = announced.append
    group = parse_envelope(members[0].content).fields["group"]  # type: ignore[union-attr]
    for message in members[:2]:
        deliver(middleware, message)
        deliver(middleware, message, deliveries=2)
    assert completions(storage) == []
    assert announced == []
    deliver(middleware, members[2])
    deliver(middleware, members[2], deliveries=2)
    assert announced == ["done"]  # the host wakes the completion queue's listeners with it
    [(done, key)] = completions(storage)
    assert (done.group_id, done.handled, done.poisoned, key) == (group, 3, 0, group)
    assert done.started <= done.ended


def test_a_member_that_will_be_poisoned_is_counted_poisoned(storage: QueueStorage) -> None:
    """A member failing below its delivery limit is not settled (it is retried); failing on its
    last delivery, with a PermanentFailure, or delivered too often, it counts as poisoned (before
    the poison move); poisoned unopened, just after it."""
    members = sent_members(storage, 5)
    middleware = GroupCompletion(ledger_of(storage), storage, delivery=POLICY)
    deliver(middleware, members[0], deliveries=1, handler=failed(RuntimeError("again")))
    deliver(middleware, members[0], deliveries=3, handler=failed(RuntimeError("last")))
    deliver(middleware, members[1], handler=failed(PermanentFailure("hopeless")))
    deliver(middleware, members[2], deliveries=4, deliverable=False)
    deliver(middleware, members[3], deliverable=False, settled="poisoned")
    assert completions(storage) == []
    deliver(middleware, members[4])
    [(done, _)] = completions(storage)
    assert (done.handled, done.poisoned) == (1, 4)


def test_a_member_whose_lease_was_lost_is_not_settled(storage: QueueStorage) -> None:
    """Undeliverable because another consumer took it over (left where it is): not counted."""
    [member] = sent_members(storage, 1)
    ledger = ledger_of(storage)
    middleware = GroupCompletion(ledger, storage, delivery=POLICY)
    deliver(middleware, member, deliverable=False, settled="left")
    status = ledger.status(parse_envelope(member.content).fields["group"])  # type: ignore[union-attr]
    assert status is not None
    assert status.pending == 1


def test_a_retried_deferred_or_rerouted_member_is_not_settled(storage: QueueStorage) -> None:
    """A member a middleware retries, defers or reroutes comes back (or settles where it goes):
    the group of one stays pending; skipped (deleted unhandled) it counts as handled."""
    [member] = sent_members(storage, 1)
    ledger = ledger_of(storage)
    middleware = GroupCompletion(ledger, storage, delivery=POLICY)
    deliver(middleware, member, handler=lambda context: context.retry("later", delay_s=1))
    deliver(middleware, member, handler=lambda context: context.reroute("elsewhere"))
    assert ledger.owed() == []
    deliver(middleware, member, handler=lambda context: context.skip("cancelled"))
    [(done, _)] = completions(storage)
    assert (done.handled, done.poisoned) == (1, 0)


def started(completion: GroupCompletion) -> None:
    """A listener with ``completion`` starts: it publishes the completions owed."""
    completion.on_start(ListenerStarted("work", 1, threading.Event()))


def test_a_crash_before_the_publish_completes_once_on_a_restart_after_its_lease(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The process dies after recording the last member, before the ``GroupDone`` is put: the
    dead settler's claim holds the completion until its lease ends; a listener started on the
    reopened file after that sends it, once; a second start sends nothing."""
    storage = SqliteQueueStorage(tmp_path / "q.db", clock=clock)
    [member] = sent_members(storage, 1)
    dying = GroupCompletion(ledger_of(storage), CrashingPuts(storage, "done"), delivery=POLICY)
    with pytest.raises(Crash):
        deliver(dying, member)
    storage.close()
    reopened = SqliteQueueStorage(tmp_path / "q.db", clock=clock)
    started(GroupCompletion(ledger_of(reopened), reopened, delivery=POLICY))
    assert reopened.approximate_message_count("done") == 0
    clock.advance(COMPLETION_LEASE_S)
    for _ in range(2):
        started(GroupCompletion(ledger_of(reopened), reopened, delivery=POLICY))
    [(done, _)] = completions(reopened)
    assert done.handled == 1
    reopened.close()


class SweepBeforePut:
    """A store whose first put to ``done`` lets another listener start first: its start-time
    sweep runs between the last member's record and the publish of its completion."""

    def __init__(self, inner: QueueStorage, sweep: Callable[[], None]) -> None:
        self.inner, self.sweep, self.done = inner, sweep, "done"

    def put_message(self, queue_name: str, content: str, **options: Any) -> QueueMessage:
        sweep, self.sweep = self.sweep, _nothing
        if queue_name == self.done:
            sweep()
        return self.inner.put_message(queue_name, content, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _nothing() -> None:
    """No sweep left to run."""


def test_a_listener_starting_while_the_last_member_publishes_leaves_it_to_it(
    storage: QueueStorage,
) -> None:
    """Another listener starts between the record of the last member and its publish: that
    listener's sweep finds the completion claimed by the live settler and publishes nothing;
    one ``GroupDone``, marked sent."""
    [member] = sent_members(storage, 1)
    starting = GroupCompletion(ledger_of(storage), storage, delivery=POLICY)
    swept = SweepBeforePut(storage, lambda: started(starting))
    deliver(GroupCompletion(ledger_of(storage), swept, delivery=POLICY), member)
    assert [done.handled for done, _ in completions(storage)] == [1]
    assert ledger_of(storage).owed() == []


def test_on_azure_a_listener_starting_while_the_last_member_publishes_leaves_it_to_it(
    azurite_with_tables: AzuriteProcess,
) -> None:
    """The same race on Azurite's queues and Table service: the starting listener's claim is
    refused (If-Match on the group row), one ``GroupDone``, marked sent."""
    storage = open_storage(azurite_with_tables.connection_string)
    work, done = (f"{name}{uuid.uuid4().hex[:12]}" for name in ("work", "done"))
    [member] = sent_members(storage, 1, work=work, done=done)
    starting = GroupCompletion(ledger_of(storage), storage, delivery=POLICY)
    swept = SweepBeforePut(storage, lambda: started(starting))
    swept.done = done
    deliver(GroupCompletion(ledger_of(storage), swept, delivery=POLICY), member)
    [(completion, group)] = completions(storage, done)
    status = ledger_of(storage).status(str(group))
    assert status is not None
    assert (completion.handled, status.completion) == (1, "sent")
    storage.close()


def test_a_start_that_takes_a_completion_and_dies_leaves_it_to_the_next_after_its_lease(
    storage: QueueStorage, clock: ManualClock
) -> None:
    """A listener's start claims an owed completion and is killed before publishing it: a start
    within its lease sends nothing, the first start after it sends it, once."""
    [member] = sent_members(storage, 1)
    dying = GroupCompletion(ledger_of(storage), CrashingPuts(storage, "done"), delivery=POLICY)
    with pytest.raises(Crash):
        deliver(dying, member)
    clock.advance(COMPLETION_LEASE_S)
    with pytest.raises(Crash):
        started(dying)  # claimed, killed before its put
    clock.advance(COMPLETION_LEASE_S - 1)
    started(GroupCompletion(ledger_of(storage), storage, delivery=POLICY))
    assert storage.approximate_message_count("done") == 0
    clock.advance(1)
    for _ in range(2):
        started(GroupCompletion(ledger_of(storage), storage, delivery=POLICY))
    assert [done.handled for done, _ in completions(storage)] == [1]


def test_a_crash_before_the_publish_completes_on_the_members_redelivery(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The last member's message was not deleted (the crash came first): redelivered while the
    dead settler's claim runs, it is retried when the claim ends (not deleted); redelivered
    after, it takes the claim and sends the completion, once."""
    storage = SqliteQueueStorage(tmp_path / "q.db", clock=clock)
    [member] = sent_members(storage, 1)
    dying = GroupCompletion(ledger_of(storage), CrashingPuts(storage, "done"), delivery=POLICY)
    with pytest.raises(Crash):
        deliver(dying, member)
    again = GroupCompletion(ledger_of(storage), storage, delivery=POLICY)
    early = deliver(again, member, deliveries=2)
    assert early.decision is not None
    assert (early.decision.kind, early.decision.delay_s) == ("retry", COMPLETION_LEASE_S)
    clock.advance(COMPLETION_LEASE_S)
    assert deliver(again, member, deliveries=3).decision is None
    assert deliver(again, member, deliveries=3).decision is None
    assert [done.handled for done, _ in completions(storage)] == [1]
    storage.close()


def test_another_member_redelivered_while_the_claim_runs_is_settled_as_usual(
    storage: QueueStorage, clock: ManualClock
) -> None:
    """The second of two members completes the group and its process dies before the put: the
    first member redelivered then (a duplicate) is settled as usual, not retried -- the second's
    message carries the completion -- and the second's redelivery after the lease sends it."""
    first, second = sent_members(storage, 2)
    alive = GroupCompletion(ledger_of(storage), storage, delivery=POLICY)
    deliver(alive, first)
    dying = GroupCompletion(ledger_of(storage), CrashingPuts(storage, "done"), delivery=POLICY)
    with pytest.raises(Crash):
        deliver(dying, second)
    assert deliver(alive, first, deliveries=2).decision is None
    held = deliver(alive, second, deliveries=2).decision
    assert held is not None
    assert held.kind == "retry"
    assert storage.approximate_message_count("done") == 0
    clock.advance(COMPLETION_LEASE_S)
    deliver(alive, second, deliveries=3)
    assert [done.handled for done, _ in completions(storage)] == [2]


def test_on_its_last_delivery_the_last_member_publishes_under_the_claim_held(
    storage: QueueStorage,
) -> None:
    """Redelivered for the last time while the dead settler's claim runs, the member is not
    retried (it would be poisoned): it publishes the completion itself, once."""
    [member] = sent_members(storage, 1)
    dying = GroupCompletion(ledger_of(storage), CrashingPuts(storage, "done"), delivery=POLICY)
    with pytest.raises(Crash):
        deliver(dying, member)
    last = deliver(
        GroupCompletion(ledger_of(storage), storage, delivery=POLICY), member, deliveries=3
    )
    assert last.decision is None
    assert [done.handled for done, _ in completions(storage)] == [1]


def test_a_ledger_out_of_reach_retries_the_member_rather_than_lose_it() -> None:
    """The ledger cannot be written: the member is retried later, not deleted unrecorded."""
    storage = InMemoryQueueStorage()
    [member] = sent_members(storage, 1)

    class Unreachable:
        def settle_many(self, *args: object) -> None:
            raise TransientStorageError("ledger down")

    middleware = GroupCompletion(Unreachable(), storage, delivery=POLICY)  # type: ignore[arg-type]
    with capture_logs() as logs:
        context = deliver(middleware, member)
    assert context.decision is not None
    assert context.decision.kind == "retry"
    assert [e["event"] for e in logs] == ["group_ledger_unavailable"]


def test_a_completion_queue_missing_keeps_the_completion_owed_until_a_start() -> None:
    """The completion queue does not exist yet when the last member settles: the completion
    stays owed (``group_done_not_sent``), and a listener starting once it exists puts it."""
    storage = InMemoryQueueStorage()
    storage.create_queue("work")
    Publisher(storage, "work", dict).send_group([{"n": 1}], on_complete="done")
    [member] = storage.get_messages("work", max_messages=1, visibility_timeout_s=60)
    middleware = GroupCompletion(ledger_of(storage), storage, delivery=POLICY)
    with capture_logs() as logs:
        deliver(middleware, member)
    assert "group_done_not_sent" in [e["event"] for e in logs]
    storage.create_queue("done")
    middleware.on_start(ListenerStarted("work", 1, threading.Event()))
    assert [done.handled for done, _ in completions(storage)] == [1]
    assert ledger_of(storage).owed() == []
