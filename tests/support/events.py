"""Event documents as Event Grid delivers them, following Microsoft's published schemas.

``BLOB_CREATED_*``: Azure Blob Storage's ``Microsoft.Storage.BlobCreated`` event (the example in
"Azure Blob Storage as an Event Grid source"), in the Event Grid and the CloudEvents 1.0 schema.
``CUSTOM_*``: a custom topic's event, as an application publishes it.
"""

from __future__ import annotations

from typing import Any

_TOPIC = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/photos/providers/"
    "Microsoft.Storage/storageAccounts/photostore"
)
_BLOB_DATA = {
    "api": "PutBlob",
    "clientRequestId": "6d79dbfb-0e37-4fc4-981f-442c9ca89e5d",
    "requestId": "831e1650-001e-001b-66ab-eeb76e069631",
    "eTag": "0x8D4BCC2E4835CD0",
    "contentType": "image/jpeg",
    "contentLength": 524288,
    "blobType": "BlockBlob",
    "url": "https://photostore.blob.core.windows.net/photos/cat.jpg",
    "sequencer": "00000000000004420000000000028963",
    "storageDiagnostics": {"batchId": "b68529f3-68cd-4744-baa4-3c0498ec19f0"},
}

BLOB_CREATED_EVENT_GRID: dict[str, Any] = {
    "topic": _TOPIC,
    "subject": "/blobServices/default/containers/photos/blobs/cat.jpg",
    "eventType": "Microsoft.Storage.BlobCreated",
    "eventTime": "2026-11-23T12:00:00.1234567Z",
    "id": "831e1650-001e-001b-66ab-eeb76e069631",
    "data": _BLOB_DATA,
    "dataVersion": "",
    "metadataVersion": "1",
}

BLOB_CREATED_CLOUD_EVENT: dict[str, Any] = {
    "source": _TOPIC,
    "subject": "/blobServices/default/containers/photos/blobs/cat.jpg",
    "type": "Microsoft.Storage.BlobCreated",
    "time": "2026-11-23T12:00:00.1234567Z",
    "id": "831e1650-001e-001b-66ab-eeb76e069631",
    "data": _BLOB_DATA,
    "specversion": "1.0",
}

CUSTOM_EVENT_GRID: dict[str, Any] = {
    "id": "9a2f4c1e-7b1d-4c7e-8f0a-3c2b1a0d9e8f",
    "subject": "orders/42",
    "eventType": "Contoso.Orders.OrderPlaced",
    "eventTime": "2026-11-23T12:00:01Z",
    "data": {"orderId": 42, "customer": "Zoë Ñuñez"},
    "dataVersion": "1.0",
    "topic": "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/shop/"
    "providers/Microsoft.EventGrid/topics/orders",
    "metadataVersion": "1",
}

CUSTOM_CLOUD_EVENT: dict[str, Any] = {
    "specversion": "1.0",
    "id": "9a2f4c1e-7b1d-4c7e-8f0a-3c2b1a0d9e8f",
    "source": "/contoso/orders",
    "subject": "orders/42",
    "type": "Contoso.Orders.OrderPlaced",
    "time": "2026-11-23T12:00:01Z",
    "datacontenttype": "application/json",
    "data": {"orderId": 42, "customer": "Zoë Ñuñez"},
}
