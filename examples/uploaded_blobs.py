"""Process every uploaded blob: a worker on the queue an Event Grid subscription fills.

Set-up in Azure (once): an Event Grid subscription on the storage account, filtered to
``Microsoft.Storage.BlobCreated``, with a storage queue ``uploaded-blobs`` as its endpoint; either
delivery schema (Event Grid or CloudEvents 1.0) works, base64 or not. Then run::

    export CLOUDQUEUE_CONNECTION_STRING=https://ACCOUNT.queue.core.windows.net
    export CLOUDQUEUE_CREDENTIAL=managed_identity      # no key: see "Signing in with Entra ID"
    cloudqueue run examples.uploaded_blobs:UploadedBlobWorker

Each event names the blob's URL, type and size; a real worker would download and process it
(e.g. with azure-storage-blob's ``BlobClient.from_blob_url(url, credential=...)``).
"""

from __future__ import annotations

from typing import Any

import structlog
from azure.core.messaging import CloudEvent

from cloudqueue import QueueWorker

log = structlog.get_logger(__name__)

BLOB_CREATED = "Microsoft.Storage.BlobCreated"


class UploadedBlobWorker(QueueWorker[CloudEvent[Any]]):
    """Handles each uploaded blob once; other event types are acknowledged and skipped."""

    queue_name = "uploaded-blobs"

    def handle(self, item: CloudEvent[Any]) -> None:
        if item.type != BLOB_CREATED or not isinstance(item.data, dict):
            log.info("event_skipped", event_type=item.type, event_id=item.id)
            return
        log.info(
            "blob_uploaded",
            url=item.data.get("url"),
            content_type=item.data.get("contentType"),
            bytes=item.data.get("contentLength"),
            event_id=item.id,
        )
