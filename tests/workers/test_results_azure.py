"""Results on Azure: a worker with ``keep_results`` on Azurite keeps its handler's value in the
account's Table service, and ``send``'s handle returns it."""

from __future__ import annotations

from cloudqueue.listener import Publisher
from cloudqueue.listener.stores.connection import open_storage
from cloudqueue.workers.api.result_handles import result_handle
from tests.support.azurite import AzuriteProcess
from tests.support.keyed_workers import host_settings, hosting
from tests.support.result_workers import Price, Priced, Pricer


def test_a_handlers_value_comes_back_from_the_table_service(
    azurite_with_tables: AzuriteProcess, queue_name: str
) -> None:
    """The value is kept under the message's key in the ``cloudqueueresults`` table, and read
    back as the handler's model."""

    class AzurePricer(Pricer):
        pass

    AzurePricer.queue_name = queue_name
    storage = open_storage(azurite_with_tables.connection_string)
    try:
        storage.create_queue(queue_name)
        key = f"order-{queue_name}"
        Publisher(storage, queue_name, Price).publish(Price(sku="a", cents=21), key=key)
        handle = result_handle(AzurePricer, key, storage, None)
        with hosting(AzurePricer, storage, host_settings()):
            assert handle.result(timeout_s=60) == Priced(sku="a", total=42)
    finally:
        storage.close()
