"""The group ledger: how many members a group has and which of them have settled, counted by
*distinct* member, in the queue's own store.

A group is opened with its members' count before they are sent; a member's handler may add members
before it settles (fan-out found at run time), each addition recorded under a name, so that its
repeat by a redelivered handler gets the same member ids and adds nothing. Each member is settled
once -- handled or poisoned -- by one atomic step (``GroupLedger.settle``) that inserts the
member's mark (a second settlement of the same member, a redelivery or a duplicate, finds it and
changes nothing) and counts it. The step that counts the last member also records the completion as
*owed* and answers with the group's final status: exactly one caller ever hears "you settled the
last member". That caller publishes the ``GroupDone`` and then marks the completion *sent*.

Publishing an owed completion is *claimed*, so that one party publishes it while that party
lives: the settler of the last member holds the claim from that step (``ended``) for
``COMPLETION_LEASE_S``, without another write; anyone else -- the member's redelivery, a listener
starting (``owed`` then ``claim``) -- takes it with one conditional write (``claim``: owed, and
its holder's lease over), for as long. A holder killed before its publish lets go when its lease
ends, so the completion is never lost; one whose put failed gives it back at once (``release``).
A holder killed between its put and ``mark_sent`` leaves a completion that is published again: the
only duplicate, under the group id as its message key, so that idempotent handling drops it
(``cloudqueue.listener.workflows.completion``). Leases are compared on each process's clock: a
skew between machines shortens or lengthens them by as much.

Stores:

* memory: a dict under a lock (this process only; ``InMemoryGroupLedger`` in
  ``cloudqueue.listener.workflows.memory_groups``);
* SQLite: two tables in the queues' file, each step one ``BEGIN IMMEDIATE`` transaction
  (``cloudqueue.listener.workflows.sqlite_groups``);
* Azure: a table ``cloudqueuegroups`` in the account's Table service, partition key the group id
  (``cloudqueue.listener.workflows.azure_groups``, rows in ``azure_group_rows``). The group's row
  (``RowKey`` ``"$group"``) holds total, started, ended and the completion state; the counter is
  sharded over ``$group-00`` ... ``$group-15`` (a member's shard: runs of 16 consecutive
  members dealt to the shards in turn); each settled member has a row (``RowKey`` its member
  id) with its outcome. ``settle_many`` settles the members of a group written together in one
  entity-group transaction in the group's partition: *create* each member's row (a 409 conflict
  names a duplicate: it is left out, the rest written again) and *update* their shards with
  ``If-Match`` (a 412 means another writer counted there meanwhile: read again, retry); the
  transaction that completes shards updates the group row too, and the one completing the last
  shard owes the completion there. ``add_members`` updates the group row and every shard in one
  transaction, and ``pass_on`` (a chain step's items, ``cloudqueue.listener.workflows.chains``)
  the same with a row per member and step (``RowKey`` ``chain:<member>:<step>``) created in it.
  One group sustains close to 2,000 settlements per second on Azure's published partition
  target (2,000 entities per second) when they are written together, about 1,000 one by one.
  The protocol below holds nothing SQLite-specific: every step is a read-decide-write on one
  group's rows. The rules every store applies to member ids, counts and repeats are
  ``cloudqueue.listener.workflows.group_rules``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from cloudqueue.listener.consumer.handler_progress import HandlerProgress
from cloudqueue.listener.errors import CloudQueueError

Settled = Literal["handled", "poisoned"]
"""How a member settled: its handler returned (the message deleted), or it was poisoned."""

COMPLETION_LEASE_S = 30.0
"""How long a claim on publishing an owed completion lasts (from the settlement of the last
member, or from a ``claim``): a publisher alive that long has put its ``GroupDone`` and marked it
sent. A put slower than that may be repeated by another claimant (then dropped by its key)."""

Completion = Literal["pending", "owed", "sent"]
"""``pending``: members still unsettled; ``owed``: the last settled, its ``GroupDone`` not yet
known to be published; ``sent``: published."""


class GroupError(CloudQueueError, ValueError):
    """A group that cannot be made or changed as asked (empty, unknown, already complete)."""


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """A group's counts as the ledger holds them."""

    group_id: str
    total: int
    handled: int
    poisoned: int
    started: datetime
    ended: datetime | None
    on_complete: str
    """The queue its ``GroupDone`` goes to."""
    completion: Completion = "pending"
    last_member: str | None = None
    """The member whose settlement completed the group: its message carries the completion
    until it is sent (None while pending, and for groups completed before it was kept)."""
    progress: tuple[HandlerProgress, ...] = ()
    """Its running members' last progress reports, when the handle was given where to read them
    (``GroupHandle(progress=...)``); the ledger itself keeps none."""

    @property
    def settled(self) -> int:
        return self.handled + self.poisoned

    @property
    def pending(self) -> int:
        return self.total - self.settled

    @property
    def done(self) -> bool:
        return self.ended is not None


@dataclass(frozen=True, slots=True)
class Addition:
    """Members added to a group: their ids, and whether they are known to be put (a repeat of
    an addition whose puts were all made)."""

    member_ids: list[str]
    put: bool = False


class GroupLedger(Protocol):
    """Groups and their settled members in the queue's own store."""

    def open(self, group_id: str, *, total: int, on_complete: str) -> GroupStatus:
        """A new group of ``total`` (>= 1) members, its start now; GroupError if it exists."""

    def add_members(self, group_id: str, count: int, *, by: str | None = None) -> Addition:
        """``count`` more members (fan-out at run time): their new member ids. GroupError when
        the group is unknown or already complete (add before the adding member settles).

        ``by`` names the addition (``cloudqueue.listener.workflows.sending.addition_name``: the
        adding message and what it adds), recorded with it: a repeat (its message redelivered)
        gets the same ids, adds nothing and hears whether they were all put (``mark_added``),
        even once the group completed; GroupError when it asks for another count."""

    def mark_added(self, group_id: str, by: str) -> None:
        """Every member of the addition ``by`` was put: a repeat need not put them again."""

    def settle(self, group_id: str, member_id: str, outcome: Settled) -> GroupStatus | None:
        """Count ``member_id`` settled, once: the final status when this call settled the last
        member (its completion now owed), else None (a duplicate, a stray id, members pending)."""

    def settle_many(
        self, settlements: Sequence[tuple[str, str, Settled]]
    ) -> list[GroupStatus | None]:
        """``settle`` for each ``(group_id, member_id, outcome)``, in order, in one write where
        the store can (memory, SQLite: all recorded or, raising, none; Azure: one transaction
        per group of up to about 97 members, so a raise may leave the first recorded --
        retried, each is then a duplicate): their answers in the same order."""

    def pass_on(self, group_id: str, member_id: str, step: str, count: int) -> list[str]:
        """The member ids of the ``count`` messages a chain step (``step``, its queue) sends on
        for ``member_id``, which stays unsettled: the member's own id first, then ``count - 1``
        members added. Once per member and step: a repeat (a redelivery) gets the same ids, and
        GroupError when it asks for another count or the group is unknown or complete."""

    def status(self, group_id: str) -> GroupStatus | None:
        """The group as it stands; None when unknown."""

    def owed(self) -> list[GroupStatus]:
        """The complete groups whose ``GroupDone`` is not marked sent."""

    def claim(self, group_id: str) -> GroupStatus | None:
        """Take the group's owed completion to publish it, for ``COMPLETION_LEASE_S``: its final
        status when it was owed and no claim on it was running, else None (sent, pending,
        unknown, or held: by the settler of its last member until that lease ends, or by
        another claimant)."""

    def release(self, group_id: str) -> None:
        """Give up a claim whose publish failed: the completion, still owed, may be taken at
        once."""

    def pending_members(self, group_id: str, limit: int) -> list[str]:
        """Up to ``limit`` ids of the group's members not settled yet, lowest first."""

    def newest(self, limit: int) -> list[GroupStatus]:
        """Up to ``limit`` groups, the most recently started first."""

    def mark_sent(self, group_id: str) -> None:
        """The group's ``GroupDone`` was published."""

    def close(self) -> None:
        """Release connections."""


def lease_end(start: datetime) -> datetime:
    """When a claim on a completion taken at ``start`` runs out."""
    return start + timedelta(seconds=COMPLETION_LEASE_S)


def claimable(group: GroupStatus, claimed_until: datetime | None, now: datetime) -> bool:
    """Whether the group's completion is owed and nobody's claim on it runs at ``now``: the
    settler of its last member holds it from ``ended``, a claimant to ``claimed_until``."""
    if group.completion != "owed" or group.ended is None:
        return False
    return now >= (claimed_until or lease_end(group.ended))


__all__ = [
    "COMPLETION_LEASE_S",
    "Addition",
    "Completion",
    "GroupError",
    "GroupLedger",
    "GroupStatus",
    "Settled",
    "claimable",
    "lease_end",
]
