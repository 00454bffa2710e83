"""The tick ledger on Azure: a blob per job, changed only under a blob lease (azure-storage-blob).

Each job's record is the metadata of the blob ``<job>`` in the ``cloudqueue-jobs`` container of
the queues' account. A claim, renewal or release takes a 15-second lease on that blob (the
shortest Azure grants), reads the metadata, writes the decided record with the lease, and breaks
nothing: it releases the lease. The lease is the mutex that makes read-decide-write atomic
across machines; the job's own lease (``lease_until`` in the record) may then be as short as its
interval asks, which a blob lease (15-60 s or infinite) could not be.

A process killed inside those few milliseconds leaves the blob leased for 15 s: the others retry
for two seconds, then break the lease (a write the holder might still make with it then fails,
so nothing is decided twice). Each claim costs four transactions (lease, read, write, release).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any, TypeVar

import structlog
from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobClient, BlobLeaseClient, ContainerClient

from cloudqueue.listener import errors
from cloudqueue.listener.clock import EVENT_SLEEPER, SYSTEM_CLOCK, Clock, Sleeper
from cloudqueue.listener.stores.azure_errors import translate_error
from cloudqueue.listener.stores.azure_payloads import (
    container_from_account_url,
    container_from_connection_string,
)
from cloudqueue.listener.stores.tick_ledger import Claim, JobRecord, claimed, released, renewed

__all__ = ["JOBS_CONTAINER", "AzureTickLedger"]

log = structlog.get_logger(__name__)

JOBS_CONTAINER = "cloudqueue-jobs"
_MUTEX_LEASE_S = 15
_LEASE_TRIES = 40
_LEASE_RETRY_S = 0.05

R = TypeVar("R")


class AzureTickLedger:
    """Job records as blob metadata, each change made under a blob lease."""

    def __init__(
        self,
        container: ContainerClient,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sleeper: Sleeper = EVENT_SLEEPER,
    ) -> None:
        self._container = container
        self._clock = clock
        self._sleeper = sleeper
        self._never = threading.Event()  # a wait on it is a pause between tries

    @classmethod
    def from_connection_string(
        cls, connection_string: str, *, sleeper: Sleeper = EVENT_SLEEPER, **overrides: Any
    ) -> AzureTickLedger:
        container = container_from_connection_string(connection_string, JOBS_CONTAINER, **overrides)
        return cls(container, sleeper=sleeper)

    @classmethod
    def from_account_url(cls, account_url: str, credential: TokenCredential) -> AzureTickLedger:
        """Connect to a blob service URL with a token credential (Microsoft Entra ID)."""
        return cls(container_from_account_url(account_url, JOBS_CONTAINER, credential))

    def claim(
        self, job: str, tick: datetime, *, holder: str, lease_s: float, handover: bool = False
    ) -> Claim:
        def decide(record: JobRecord) -> tuple[JobRecord | None, Claim]:
            now = self._clock.now()
            claim = claimed(record, tick, holder, lease_s, now, handover=handover)
            return (claim.record if claim.fired else None), claim

        return self._change(job, decide)

    def renew(self, job: str, *, holder: str, lease_s: float) -> bool:
        def decide(record: JobRecord) -> tuple[JobRecord | None, bool]:
            changed = renewed(record, holder, lease_s, self._clock.now())
            return changed, changed is not None

        return self._change(job, decide)

    def release(self, job: str, *, holder: str) -> None:
        self._change(job, lambda record: (released(record, holder), None))

    def record(self, job: str) -> JobRecord:
        blob = self._container.get_blob_client(job)
        try:
            with _translated("read", job):
                return JobRecord.from_fields(blob.get_blob_properties().metadata)
        except errors.QueueNotFoundError:
            return JobRecord()

    def close(self) -> None:
        self._container.close()

    def _change(self, job: str, decide: Callable[[JobRecord], tuple[JobRecord | None, R]]) -> R:
        """Read, decide and write the record while holding the blob's lease."""
        blob = self._container.get_blob_client(job)
        lease = self._lease(blob, job)
        try:
            with _translated("read", job):
                record = JobRecord.from_fields(blob.get_blob_properties(lease=lease).metadata)
            changed, answer = decide(record)
            if changed is not None:
                with _translated("write", job):
                    blob.set_blob_metadata(changed.to_fields(), lease=lease)
            return answer
        finally:
            try:
                with _translated("release the lease of", job):
                    lease.release()
            except errors.StorageError as error:
                # It expires by itself within 15 s; the claim's outcome stands.
                log.warning("job_ledger_lease_not_released", job=job, error=str(error))

    def _lease(self, blob: BlobClient, job: str) -> BlobLeaseClient:
        """The blob's lease, creating the blob (and container) on first use; a short wait while
        another process holds it, and then -- a change takes milliseconds, so its holder died
        or stalls -- the lease is broken: a write the stalled holder still makes then fails."""
        for _ in range(_LEASE_TRIES):
            try:
                return blob.acquire_lease(lease_duration=_MUTEX_LEASE_S)
            except ResourceNotFoundError:
                self._create(blob, job)
            except ResourceExistsError:  # 409 LeaseAlreadyPresent: another process changes it
                self._sleeper.wait(self._never, _LEASE_RETRY_S)
            except AzureError as error:
                raise translate_error(
                    error, operation=f"lease of job {job!r}", queue_name=""
                ) from None
        log.warning("job_ledger_lease_broken", job=job, held_s=_LEASE_TRIES * _LEASE_RETRY_S)
        with _translated("break the lease of", job):
            BlobLeaseClient(blob).break_lease(lease_break_period=0)
            return blob.acquire_lease(lease_duration=_MUTEX_LEASE_S)

    def _create(self, blob: BlobClient, job: str) -> None:
        with _translated("create the ledger of", job):
            with suppress(ResourceExistsError):
                self._container.create_container()
            with suppress(ResourceExistsError):  # another process created it meanwhile
                blob.upload_blob(b"", overwrite=False)

    def __repr__(self) -> str:
        return f"AzureTickLedger(container={JOBS_CONTAINER!r})"


@contextmanager
def _translated(operation: str, job: str) -> Iterator[None]:
    """SDK exceptions as the project's; a missing blob as QueueNotFoundError (no record yet)."""
    try:
        yield
    except ResourceNotFoundError:
        raise errors.QueueNotFoundError(f"no ledger blob for job {job!r}") from None
    except AzureError as error:
        raise translate_error(error, operation=f"{operation} job {job!r}", queue_name="") from None
