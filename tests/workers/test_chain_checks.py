"""A worker's ``then`` is checked at load: it must be a worker class, on a ``handle`` (not a batch
handler), lead to an end, and agree with the handler's return annotation; each mistake refused in
one line naming the worker, and what is right passes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest
from pydantic import BaseModel

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.stores.storage import QueueStorage
from cloudqueue.workers import CloudQueueSettings, QueueWorker
from cloudqueue.workers.host.host_keys import HostKeyLedger


class Line(BaseModel):
    sku: str


class Special(Line):
    pass


class Sink(QueueWorker[Line]):
    queue_name = "sink"

    def handle(self, item: Line) -> None:
        pass


class NotAWorker(QueueWorker[Line]):
    queue_name = "a"
    then = str  # type: ignore[assignment]  # the mistake under test

    def handle(self, item: Line) -> Line:
        return item


class Batched(QueueWorker[Line]):
    queue_name = "a"
    then = Sink

    def handle_batch(self, items: list[Line]) -> None:
        pass


class ReturnsInt(QueueWorker[Line]):
    queue_name = "a"
    then = Sink

    def handle(self, item: Line) -> int:
        return 1


class ReturnsNone(QueueWorker[Line]):
    queue_name = "a"
    then = Sink

    def handle(self, item: Line) -> None:
        pass


class Ping(QueueWorker[Line]):
    queue_name = "ping"

    def handle(self, item: Line) -> Line:
        return item


class Pong(QueueWorker[Line]):
    queue_name = "pong"
    then = Ping

    def handle(self, item: Line) -> Line:
        return item


Ping.then = Pong  # a loop: Ping -> Pong -> Ping


@pytest.mark.parametrize(
    ("worker", "message"),
    [
        (NotAWorker, "'NotAWorker': then must be the next step's worker class"),
        (Batched, "'Batched': then needs handle(self, item): a batch call's items come from"),
        (ReturnsInt, "'ReturnsInt': handle returns int, but then = Sink takes Line"),
        (ReturnsNone, "'ReturnsNone': handle returns None, but then = Sink takes Line"),
        (Ping, "'Ping': then leads back to Ping: a chain must end"),
    ],
    ids=["not-a-worker", "batch-handler", "wrong-type", "returns-none", "loop"],
)
def test_a_chain_mistake_is_refused_in_one_line(
    worker: type[QueueWorker[Any]], message: str
) -> None:
    """The worker's check names it and the mistake, in one line."""
    with pytest.raises(ConfigurationError) as refused:
        worker.check()
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_handlers_returning_items_of_the_next_type_pass() -> None:
    """One item, a subclass, a list or sequence of them, an optional one, an async handler, an
    unannotated one: all pass."""

    class One(QueueWorker[Line]):
        queue_name = "a"
        then = Sink

        def handle(self, item: Line) -> Special:
            return Special(sku=item.sku)

    class Many(QueueWorker[Line]):
        queue_name = "a"
        then = Sink

        def handle(self, item: Line) -> list[Line] | None:
            return [item]

    class Seq(QueueWorker[Line]):
        queue_name = "a"
        then = Sink

        async def handle(self, item: Line) -> Sequence[Line]:
            return (item,)

    class Plain(QueueWorker[Line]):
        queue_name = "a"
        then = Sink

        def handle(self, item):  # type: ignore[no-untyped-def]  # no annotation to check
            return item

    for worker in (One, Many, Seq, Plain):
        worker.check()


QUEUE_ONLY_AZURE = (  # Azurite's published development account, no blob endpoint
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey="
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
    "QueueEndpoint=http://127.0.0.1:1/devstoreaccount1;"
)


def test_a_chain_on_azure_without_a_blob_endpoint_is_refused_at_start() -> None:
    """Its effect-once marks need the key ledger: one line saying what to add, even with the
    cancel check (the other reader of the ledger) turned off."""
    settings = CloudQueueSettings.model_validate(
        {"connection_string": QUEUE_ONLY_AZURE, "cancel": {"check": False}}
    )
    with pytest.raises(ConfigurationError, match=r"then needs the key ledger .* BlobEndpoint"):
        HostKeyLedger(settings, cast(QueueStorage, object()), None, [settings], chains=True)
