"""Sending a group: its members, each in a message of its own that carries its membership, and a
handle to watch it (``GroupHandle``).

The group is opened in the ledger with its member count *before* any member is sent, so no member
can settle into a group that does not know its size yet. Members never expire in their queue
(unless the publisher sets a time to live): a member that expired unhandled would hold its group
open for good. A publisher's ``key`` gives each member its message key, as ``publish`` does. The
members' messages are all made first (one too large raises before any is put), then put by the
publisher (``Publisher.put_members``) one by one, in one producer span, and announced once per
group (or addition) on its trigger channel when it has one, so listeners elsewhere wake at once.
If a put fails the error is raised: the members put before it are sent, and the group stays open
with the others pending (its status shows them).
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Protocol, TypeVar

import structlog

from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.consumer.current import current_envelope
from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.producer.routing import ItemKey, PartitionRouter, key_of_item
from cloudqueue.listener.stores.storage import QueueStorage, validate_queue_name
from cloudqueue.listener.wire.codec import Codec
from cloudqueue.listener.wire.membership import Membership
from cloudqueue.listener.workflows.group_ledger import GroupError, GroupLedger, GroupStatus
from cloudqueue.listener.workflows.group_rules import member_ids as numbered
from cloudqueue.listener.workflows.membership import (
    check_group_id,
    current_membership,
    member_message,
)
from cloudqueue.listener.workflows.result_store import ResultStore
from cloudqueue.listener.workflows.result_stores import result_store_for
from cloudqueue.listener.workflows.result_values import decode_result
from cloudqueue.listener.workflows.sqlite_groups import group_ledger_for

T = TypeVar("T")

log = structlog.get_logger(__name__)


class GroupPublisher(Protocol[T]):
    """What sending members reads of a ``Publisher`` (``cloudqueue.listener.producer``), whose
    ``send_group`` calls this module: a protocol, so that this module need not import it back."""

    @property
    def storage(self) -> QueueStorage: ...
    @property
    def queue_name(self) -> str: ...
    @property
    def codec(self) -> Codec[T]: ...
    @property
    def key(self) -> ItemKey[T] | None: ...
    @property
    def router(self) -> PartitionRouter[T]: ...
    @property
    def clock(self) -> Clock: ...
    def put_members(self, messages: Sequence[tuple[str, str]]) -> int: ...


FIRST_POLL_S = 0.1
LAST_POLL_S = 5.0
"""Waiting reads the group's status after 0.1 s, then twice as long each time, up to every 5 s:
a long wait costs one read per 5 s, not one per 0.2 s."""

ProgressSource = Callable[[str], Sequence[HandlerProgress]]
"""A group's running members' progress reports, by group id: the running processes' live state
(``cloudqueue.workers.host.live_progress.group_progress_source``), where they are kept."""


class GroupHandle:
    """A sent group: its ``id``, its ``status()``, ``wait`` for its completion, and its
    members' ``results()``.

    Given ``progress``, where running handlers' reports are published, ``status()`` carries its
    running members' last progress too."""

    def __init__(
        self,
        group_id: str,
        ledger: GroupLedger,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
        results: Callable[[], ResultStore | None] | None = None,
        progress: ProgressSource | None = None,
    ) -> None:
        """``results`` opens the store the members' results are kept in (at the first
        ``results()``: a handle that never reads them opens nothing)."""
        self.id = group_id
        self.ledger = ledger
        self.clock = clock
        self.sleeper = sleeper
        self.progress = progress
        self._results = results

    @classmethod
    def of(
        cls, group_id: str, storage: QueueStorage, *, clock: Clock = SYSTEM_CLOCK
    ) -> GroupHandle:
        """The handle of a group sent earlier on ``storage`` (an aggregating step's, given the
        id by its ``GroupDone``)."""
        ledger = required_group_ledger_of(storage)
        return cls(group_id, ledger, clock=clock, results=partial(result_store_for, storage))

    def results(self, as_type: object = None) -> Iterator[Any]:
        """The results kept by the members' workers (``keep_results``), in key order: each an
        ``as_type`` when that is a pydantic model, else its JSON value. Members that kept none
        (or whose results expired) are not among them: compare with ``status()``'s counts."""
        store = None if self._results is None else self._results()
        if store is None:
            raise GroupError(f"group {self.id!r}: no result store goes with its storage")
        for _key, text in store.for_group(self.id):
            yield decode_result(text, as_type)

    def status(self) -> GroupStatus:
        """The group's counts now, with its running members' progress when it has a source."""
        status = self.ledger.status(self.id)
        if status is None:
            raise GroupError(f"no group {self.id!r}")
        if self.progress is None or status.done:
            return status
        return replace(status, progress=tuple(self.progress(self.id)))

    def wait(self, timeout_s: float) -> GroupStatus:
        """The group's status once every member settled; TimeoutError after ``timeout_s``.
        Polls with a back-off from 0.1 s to 5 s."""
        deadline = self.clock.monotonic() + timeout_s
        pause_s, never = FIRST_POLL_S, threading.Event()
        while True:
            status = self.status()
            if status.done:
                return status
            left = deadline - self.clock.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"group {self.id!r}: {status.pending} of {status.total} members pending "
                    f"after {timeout_s} s"
                )
            self.sleeper.wait(never, min(pause_s, left))
            pause_s = min(pause_s * 2, LAST_POLL_S)

    def __repr__(self) -> str:
        return f"GroupHandle({self.id!r})"


def send_group(
    publisher: GroupPublisher[T],
    items: Iterable[T],
    *,
    on_complete: object,
    group_id: str | None = None,
) -> GroupHandle:
    """Open a group of ``items`` and send each as a member (see the module docstring)."""
    members = list(items)
    if not members:
        raise GroupError("a group needs at least one member: got no items")
    queue = completion_queue(on_complete)
    ledger = required_group_ledger(publisher)
    group = uuid.uuid4().hex if group_id is None else check_group_id(group_id)
    ledger.open(group, total=len(members), on_complete=queue)
    texts = [publisher.codec.encode(item) for item in members]
    _put_members(publisher, group, members, texts, numbered(0, len(members)))
    results = partial(result_store_for, publisher.storage)
    return GroupHandle(group, ledger, clock=publisher.clock, results=results)


def add_to_group(
    publisher: GroupPublisher[T], items: Iterable[T], *, group_id: str | None
) -> list[str]:
    """Add ``items`` as members of ``group_id`` (default: the group of the message being
    handled), before the adding member settles; their member ids. Effect-once from a handler
    (see ``addition_name``): its redelivery adds the same members, puts them again only if the
    earlier delivery did not finish putting them, and the ledger counts each member id once."""
    members = list(items)
    if group_id is None:
        membership = current_membership()
        if membership is None:
            raise GroupError("add_to_group outside a group member's handler needs a group_id")
        group_id = membership.group_id
    texts = [publisher.codec.encode(item) for item in members]
    name = addition_name(publisher.queue_name, texts)
    ledger = required_group_ledger(publisher)
    added = ledger.add_members(group_id, len(members), by=name)
    if added.put:
        log.info("group_addition_put_before", group=group_id, members=len(members))
        return added.member_ids
    _put_members(publisher, group_id, members, texts, added.member_ids)
    if name is not None:
        ledger.mark_added(group_id, name)
    return added.member_ids


def addition_name(queue_name: str, texts: Sequence[str]) -> str | None:
    """The name an addition made while a message is handled is recorded under: a hash of the
    handled message's membership (else its message id) and queue, the adding publisher's queue
    and the items' texts -- what a redelivery of it adds again, so its repeat is found (the
    same marks as effect-once publishing, ``cloudqueue.listener.producer.effect_once``). None
    outside a delivery: such an addition is made each time it is asked for."""
    try:
        envelope = current_envelope()
    except LookupError:
        return None
    membership = current_membership()
    adder = (
        f"message:{envelope.message_id}"
        if membership is None
        else f"member:{membership.group_id}:{membership.member_id}"
    )
    digest = hashlib.sha256(f"{adder}\x00{envelope.queue_name}\x00{queue_name}".encode())
    for text in texts:
        digest.update(len(text).to_bytes(8, "big") + text.encode("utf-8"))
    return digest.hexdigest()[:32]


def completion_queue(on_complete: object) -> str:
    """The queue of a completion worker (a class with a ``queue_name``), or a queue name."""
    name = getattr(on_complete, "queue_name", on_complete)
    if isinstance(name, tuple) and name:
        name = name[0]  # a worker reading queues in priority order: its first
    if not isinstance(name, str):
        raise GroupError(f"on_complete must be a worker class or a queue name, got {on_complete!r}")
    try:
        return validate_queue_name(name)
    except ValueError as error:
        raise GroupError(f"on_complete: {error}") from None


def required_group_ledger(publisher: GroupPublisher[Any]) -> GroupLedger:
    return required_group_ledger_of(publisher.storage)


def required_group_ledger_of(storage: QueueStorage) -> GroupLedger:
    ledger = group_ledger_for(storage)
    if ledger is None:
        raise GroupError(
            "no group ledger goes with this storage: groups are kept in the queues' own store, "
            "so open it with open_storage(connection_string) (Azure: its Table service)"
        )
    return ledger


def _put_members(
    publisher: GroupPublisher[T],
    group_id: str,
    items: list[T],
    texts: list[str],
    member_ids: list[str],
) -> None:
    """Make every member's message (a bad one raises before any is put), then put them all
    through the publisher: one producer span, one announcement."""
    messages = []
    for item, item_text, member_id in zip(items, texts, member_ids, strict=True):
        key = None if publisher.key is None else key_of_item(item, publisher.key)
        content = member_message(item_text, Membership(group_id, member_id), key=key)
        target = (
            publisher.router.queue_for(item) if key is None else publisher.router.queue_for_key(key)
        )
        messages.append((content, target))
    publisher.put_members(messages)


__all__ = [
    "FIRST_POLL_S",
    "LAST_POLL_S",
    "GroupHandle",
    "ProgressSource",
    "add_to_group",
    "addition_name",
    "completion_queue",
    "send_group",
]
